-- Undo an acquisition whose reply never reached the caller (its future was
-- cancelled, or the command timed out), or a waiter that leaves the queue:
-- the lock may or may not have been taken, or handed to it.
-- KEYS[1]  lock hash
-- KEYS[2]  fencing counter
-- KEYS[3]  wait queue (see lock_acquire.lua)
-- ARGV[1]  owner: owner id
-- ARGV[2]  keep: token to keep ('' = none): the caller's earlier
--          acquisition, which a re-entrant attempt only counted up; the
--          final release handles that
-- ARGV[3]  publish: publish command: 'spublish' or 'publish'
-- ARGV[4]  channel: unlock channel
-- ARGV[5]  fence_ttl_ms: fencing counter TTL, milliseconds
-- Returns 1 if an acquisition of this owner was undone, 0 otherwise.
local err = wrong_type({KEYS[1], 'hash', KEYS[3], 'list'})
if err then
  return err
end
local owner = ARGV[1]
-- Its queue entry (one at most).
leave_queue(KEYS[3], redis.call('lrange', KEYS[3], 0, -1), ' ' .. owner)
local held = redis.call('hmget', KEYS[1], owner, '~t', '~w', '~f')
if not held[1] or held[2] == ARGV[2] then
  return 0
end
if held[3] and hand_to_next(KEYS[1], KEYS[3], KEYS[2], ARGV[5], tonumber(held[2]), held[4], ARGV[3], ARGV[4]) then
  return 1
end
redis.call('del', KEYS[1])
redis.call(ARGV[3], ARGV[4], 'unlock')
return 1
