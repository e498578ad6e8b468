-- Delete a fair lock whoever holds it and tell the next owner in the queue.
-- KEYS[1]  lock hash
-- KEYS[2]  queue (list)
-- KEYS[3]  queue deadlines (zset, server time in ms)
-- KEYS[4]  fencing counter
-- ARGV[1]  publish command: 'spublish' or 'publish'
-- ARGV[2]  channel
-- Returns {1, last} if it was locked, {0, last} if not (nothing written),
-- `last` the last fencing token issued: every acquisition with a token up
-- to it ran before this script and is gone. Keys of another type are an
-- error and left untouched.
local err = wrong_type({KEYS[1], 'hash', KEYS[2], 'list', KEYS[3], 'zset'})
if err then
  return err
end
local last
last, err = read_fence(KEYS[4])
if err then
  return err
end
if redis.call('del', KEYS[1]) == 0 then
  return {0, last}
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('zrangebyscore', KEYS[3], '-inf', now)
for _, gone in ipairs(expired) do
  redis.call('lrem', KEYS[2], 0, gone)
end
if #expired > 0 then
  redis.call('zremrangebyscore', KEYS[3], '-inf', now)
end
local head = redis.call('lindex', KEYS[2], 0)
while head and not redis.call('zscore', KEYS[3], head) do
  redis.call('lpop', KEYS[2])
  head = redis.call('lindex', KEYS[2], 0)
end
if head then
  redis.call(ARGV[1], ARGV[2], head)
end
return {1, last}
