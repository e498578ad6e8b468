-- Remove what blocks a fair lock, whoever it is, and tell the next owner in
-- the queue: the holder if any; when it is free, the queue's head (a crashed
-- waiter keeps everyone behind it waiting until its queue lease ends; a live
-- head queues again at its next attempt).
-- KEYS[1]  lock hash
-- KEYS[2]  queue (list)
-- KEYS[3]  queue deadlines (zset, server time in ms)
-- KEYS[4]  fencing counter
-- ARGV[1]  publish command: 'spublish' or 'publish'
-- ARGV[2]  channel
-- Returns {1, last} if it removed the holder or a head, {0, last} if
-- nothing was there (only ended queue entries are pruned then), `last` at
-- least the last fencing token issued (see last_issued in prelude.lua).
-- Keys of another type are an error and left untouched.
local err = wrong_type({KEYS[1], 'hash', KEYS[2], 'list', KEYS[3], 'zset'})
if err then
  return err
end
local last
last, err = last_issued(KEYS[4])
if err then
  return err
end
local now = server_time()
-- The live queue: entries whose queue lease ended, and entries without a
-- deadline at the head, are gone already.
local expired = redis.call('zrangebyscore', KEYS[3], '-inf', now)
for _, gone in ipairs(expired) do
  redis.call('lrem', KEYS[2], 0, gone)
end
if #expired > 0 then
  redis.call('zremrangebyscore', KEYS[3], '-inf', now)
end
local function live_head()
  local head = redis.call('lindex', KEYS[2], 0)
  while head and not redis.call('zscore', KEYS[3], head) do
    redis.call('lpop', KEYS[2])
    head = redis.call('lindex', KEYS[2], 0)
  end
  return head
end
local head = live_head()
if redis.call('del', KEYS[1]) == 0 then
  if not head then
    return {0, last}
  end
  redis.call('lpop', KEYS[2])
  redis.call('zrem', KEYS[3], head)
  head = live_head()
end
if head then
  redis.call(ARGV[1], ARGV[2], head)
end
return {1, last}
