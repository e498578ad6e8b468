-- Release one hold (or the owner's whole hold) of a fair lock and tell the
-- next owner in the queue.
-- KEYS[1]  lock hash (see fair_lock_acquire.lua)
-- KEYS[2]  queue (list)
-- KEYS[3]  queue deadlines (zset, server time in ms)
-- ARGV[1]  owner id
-- ARGV[2]  fencing token of the acquisition being released
-- ARGV[3]  '1' = last local hold: drop the owner's field whatever its count
-- ARGV[4]  publish command: 'spublish' or 'publish'
-- ARGV[5]  channel
-- Returns {0, ''} not held by this owner/acquisition (nothing written,
-- nothing published), {1, ''} still held (re-entrant), {2, ''} released with
-- nobody queued, {3, next owner id} released and the next owner (the queue
-- head after evicting expired waiters) told: the id is the message payload.
local lock, queue, deadlines = KEYS[1], KEYS[2], KEYS[3]
local owner = ARGV[1]
local err = wrong_type({lock, 'hash', queue, 'list', deadlines, 'zset'})
if err then
  return err
end
local held = redis.call('hmget', lock, owner, '~t')
if not held[1] or held[2] ~= ARGV[2] then
  return {0, ''}
end
if ARGV[3] ~= '1' and tonumber(held[1]) > 1 then
  redis.call('hincrby', lock, owner, -1)
  return {1, ''}
end
local head = redis.call('lindex', queue, 0)
redis.call('del', lock)

local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('zrangebyscore', deadlines, '-inf', now)
for _, gone in ipairs(expired) do
  redis.call('lrem', queue, 0, gone)
end
if #expired > 0 then
  redis.call('zremrangebyscore', deadlines, '-inf', now)
  head = redis.call('lindex', queue, 0)
end
while head and not redis.call('zscore', deadlines, head) do
  redis.call('lpop', queue)
  head = redis.call('lindex', queue, 0)
end
if head then
  redis.call(ARGV[4], ARGV[5], head)
  return {3, head}
end
return {2, ''}
