-- Release one hold (or the owner's whole hold) of a reentrant lock.
-- KEYS[1]  lock hash
-- KEYS[2]  fencing counter (optional)
-- KEYS[3]  wait queue (see lock_acquire.lua; optional: without it, waiters
--          are woken, not handed the lock, as while the slot migrates)
-- ARGV[1]  owner id
-- ARGV[2]  fencing token of the acquisition being released
-- ARGV[3]  '1' = last local hold: drop the owner's field whatever its count
-- ARGV[4]  publish command: 'spublish' (Redis >= 7) or 'publish'
-- ARGV[5]  unlock channel (an argument, not a key: a key the node does not
--          have would make a cluster refuse the script mid-migration)
-- ARGV[6]  fencing counter TTL, milliseconds
-- Returns 0 not held by this owner/acquisition (nothing written, nothing
-- published), 1 still held (re-entrant), 2 released (nobody had tried:
-- nothing published), 3 released and waiters of other clients woken (they
-- tried, none is queued), 4 handed to the oldest queued waiter.
local lock, owner = KEYS[1], ARGV[1]
local held = redis.pcall('hmget', lock, owner, '~t', '~w', '~f')
local err = read_error(held, lock, 'lock')
if err then
  return err
end
if not held[1] or held[2] ~= ARGV[2] then
  return 0
end
if ARGV[3] ~= '1' and tonumber(held[1]) > 1 then
  redis.call('hincrby', lock, owner, -1)
  return 1
end
-- Only waiters of other clients ask Redis (local ones queue in their
-- client), and each marked '~w' when it found the lock busy.
if not held[3] then
  redis.call('del', lock)
  return 2
end
-- Handed to the oldest queued waiter, or (nobody queued, or the queue or
-- the counter is not ours) freed and every waiter woken.
if KEYS[3] and hand_to_next(lock, KEYS[3], KEYS[2], ARGV[6], tonumber(held[2]), held[4], ARGV[4], ARGV[5]) then
  return 4
end
redis.call('del', lock)
redis.call(ARGV[4], ARGV[5], 'unlock')
return 3
