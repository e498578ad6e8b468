-- A waiter leaves the queue of a fair lock (it timed out, was cancelled or its
-- guard was dropped), undoing an acquisition its lost reply may have made.
-- KEYS[1]  lock hash (see fair_lock_acquire.lua)
-- KEYS[2]  queue (list)
-- KEYS[3]  queue deadlines (zset, server time in ms)
-- ARGV[1]  owner id
-- ARGV[2]  fencing token to keep ('' = none): a live hold of the owner on
--          this client; any other acquisition of the owner is deleted
-- ARGV[3]  publish command: 'spublish' or 'publish'
-- ARGV[4]  channel
-- Returns 1 if an acquisition of the owner was deleted, 0 otherwise. When the
-- lock is free afterwards and its queue head changed (or the lock was freed
-- here), the new head's id is published.
local lock, queue, deadlines = KEYS[1], KEYS[2], KEYS[3]
local owner = ARGV[1]
local err = wrong_type({lock, 'hash', queue, 'list', deadlines, 'zset'})
if err then
  return err
end
local held = redis.call('hmget', lock, owner, '~t')
local old_head = redis.call('lindex', queue, 0)

redis.call('lrem', queue, 0, owner)
redis.call('zrem', deadlines, owner)
local freed = 0
if held[1] and held[2] ~= ARGV[2] then
  redis.call('del', lock)
  freed = 1
end

local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('zrangebyscore', deadlines, '-inf', now)
for _, gone in ipairs(expired) do
  redis.call('lrem', queue, 0, gone)
end
if #expired > 0 then
  redis.call('zremrangebyscore', deadlines, '-inf', now)
end
local head = redis.call('lindex', queue, 0)
while head and not redis.call('zscore', deadlines, head) do
  redis.call('lpop', queue)
  head = redis.call('lindex', queue, 0)
end
if head and (freed == 1 or head ~= old_head) and redis.call('exists', lock) == 0 then
  redis.call(ARGV[3], ARGV[4], head)
end
return freed
