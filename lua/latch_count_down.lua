-- Counts a count-down latch down by one; at zero it opens: it stays, open
-- (n = 0), for its TTL again, and its waiters are woken.
-- KEYS[1]  latch hash (see latch_set_count.lua)
-- ARGV[1]  id of this count-down: a second run of it counts nothing
-- ARGV[2]  publish command: 'spublish' (Redis >= 7) or 'publish'
-- ARGV[3]  the latch's channel
-- Returns the count left (0 for a latch that is open or not set: nothing
-- written).
local latch = KEYS[1]
local seen = redis.pcall('hmget', latch, 'n', 't', 'd:' .. ARGV[1])
local err = read_error(seen, latch, 'count-down latch')
if err then
  return err
end
-- A hash without a count is not a latch: left untouched.
if not tonumber(seen[1]) and redis.call('exists', latch) == 1 then
  return redis.error_reply('WRONGTYPE ' .. latch .. ' is not a redisync count-down latch')
end
local left = tonumber(seen[1])
if not left or left <= 0 or seen[3] then
  return left or 0
end
left = left - 1
if left > 0 then
  redis.call('hset', latch, 'n', left, 'd:' .. ARGV[1], 1)
  return left
end
-- Open: the count-down marks go (nothing counts any more).
local id, ttl, prev = unpack(redis.call('hmget', latch, 'id', 't', 'p'))
redis.call('del', latch)
if prev then
  redis.call('hset', latch, 'n', 0, 'id', id, 't', ttl, 'p', prev)
else
  redis.call('hset', latch, 'n', 0, 'id', id, 't', ttl)
end
redis.call('pexpire', latch, ttl)
redis.call(ARGV[2], ARGV[3], 'o')
return 0
