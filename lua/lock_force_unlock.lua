-- Delete a lock whoever holds it and wake its waiters.
-- KEYS[1]  lock hash
-- KEYS[2]  fencing counter
-- ARGV[1]  publish: publish command: 'spublish' or 'publish'
-- ARGV[2]  channel: unlock channel
-- ARGV[3]  fence_ttl_ms: fencing counter TTL, milliseconds; unused here
--          (every kind's force-unlock is sent the same arguments)
-- Returns {1, last} if it was locked, {0, last} if not, `last` at least the
-- last fencing token issued (see last_issued in lib/tokens.lua). A key of
-- another type is an error.
local err = wrong_type({KEYS[1], 'hash'})
if err then
  return err
end
local last
last, err = last_issued(KEYS[2])
if err then
  return err
end
if redis.call('del', KEYS[1]) == 0 then
  return {0, last}
end
redis.call(ARGV[1], ARGV[2], 'unlock')
return {1, last}
