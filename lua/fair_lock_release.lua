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
local held = redis.pcall('hmget', lock, owner, '~t')
local err = read_error(held, lock, 'fair lock')
if err then
  return err
end
if not held[1] or held[2] ~= ARGV[2] then
  return {0, ''}
end
if ARGV[3] ~= '1' and tonumber(held[1]) > 1 then
  redis.call('hincrby', lock, owner, -1)
  return {1, ''}
end
-- The reads validate the queue keys before anything is written; an empty
-- queue has no deadlines to purge.
local head = redis.pcall('lindex', queue, 0)
err = read_error(head, queue, 'fair lock queue')
if err then
  return err
end
local expired = {}
local now
if head then
  now = server_time()
  expired = redis.pcall('zrangebyscore', deadlines, '-inf', now)
  err = read_error(expired, deadlines, 'fair lock queue deadline zset')
  if err then
    return err
  end
end
redis.call('del', lock)
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
