-- Delete a lock whoever holds it and wake its waiters.
-- KEYS[1]  lock hash
-- ARGV[1]  publish command: 'spublish' or 'publish'
-- ARGV[2]  unlock channel
-- Returns 1 if it was locked, 0 if not. A key of another type is an error.
local err = wrong_type({KEYS[1], 'hash'})
if err then
  return err
end
if redis.call('del', KEYS[1]) == 0 then
  return 0
end
redis.call(ARGV[1], ARGV[2], 'unlock')
return 1
