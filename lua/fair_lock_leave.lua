-- A waiter leaves the queue of a fair lock (it timed out, was cancelled, or
-- its client shuts down), undoing an acquisition its lost reply may have
-- made or a release may have handed it meanwhile.
-- KEYS[1]  lock hash (see fair_lock_acquire.lua)
-- KEYS[2]  fencing counter
-- KEYS[3]  wait queue
-- ARGV[1]  owner: owner id
-- ARGV[2]  keep: fencing token to keep ('' = none): a live hold of the
--          owner on this client; any other acquisition of the owner is
--          deleted
-- ARGV[3]  publish: publish command: 'spublish' or 'publish'
-- ARGV[4]  channel: channel
-- ARGV[5]  fence_ttl_ms: fencing counter TTL, milliseconds
-- Returns 1 if an acquisition of the owner was deleted, 0 otherwise (also
-- when the lock's key holds something else: only the entries go). What it
-- deleted goes to the oldest live waiter; so does a free lock that live
-- waiters wait for (they would otherwise find it only when they next look).
local lock, fence, queue, owner = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
local err = wrong_type({queue, 'list'})
if err then
  return err
end
leave_queue(queue, redis.call('lrange', queue, 0, -1), ' ' .. owner)
if wrong_type({lock, 'hash'}) then
  -- No acquisition of ours lives in a key of another type (the waiter was
  -- told WrongType): nothing more to undo, and the key is left as it is.
  return 0
end
local held = redis.call('hmget', lock, owner, '~t', '~w')
if held[1] and held[2] ~= ARGV[2] then
  if held[3] and hand_to_next(lock, queue, fence, ARGV[5], tonumber(held[2]), nil, ARGV[3], ARGV[4]) then
    return 1
  end
  redis.call('del', lock)
  redis.call(ARGV[3], ARGV[4], 'unlock')
  return 1
end
if not held[2] and redis.call('exists', lock) == 0 and redis.call('llen', queue) > 0 then
  local counter = read_fence(fence)
  if counter then
    hand_to_next(lock, queue, fence, ARGV[5], counter, nil, ARGV[3], ARGV[4])
  end
end
return 0
