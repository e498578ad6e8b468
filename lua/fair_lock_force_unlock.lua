-- Remove what blocks a fair lock, whoever it is, and hand the lock to the
-- oldest live waiter: the holder if any; when it is free, the queue's head
-- (a waiter that crashed after its last refresh would otherwise be handed
-- the lock and keep it for its lease).
-- KEYS[1]  lock hash
-- KEYS[2]  fencing counter
-- KEYS[3]  wait queue (see fair_lock_acquire.lua)
-- ARGV[1]  publish: publish command: 'spublish' or 'publish'
-- ARGV[2]  channel: channel
-- ARGV[3]  fence_ttl_ms: fencing counter TTL, milliseconds
-- Returns {1, last} if it removed the holder or a head, {0, last} if
-- nothing was there, `last` at least the last fencing token issued (see
-- last_issued in lib/tokens.lua); the waiter handed the lock gets a token
-- above it. Keys of another type are an error and left untouched.
local err = wrong_type({KEYS[1], 'hash', KEYS[3], 'list'})
if err then
  return err
end
local last
last, err = last_issued(KEYS[2])
if err then
  return err
end
if redis.call('del', KEYS[1]) == 0 and not redis.call('lpop', KEYS[3]) then
  return {0, last}
end
hand_to_next(KEYS[1], KEYS[3], KEYS[2], ARGV[3], last, nil, ARGV[1], ARGV[2])
return {1, last}
