-- Counts a count-down latch down by one; at zero it opens: it stays, open
-- (n = 0), for its TTL again, and its waiters are woken.
-- KEYS[1]  latch hash (see latch_set_count.lua)
-- KEYS[2]  the count-downs counted lately: hash, op id -> the count it
--          left; it expires ARGV[4] after the last count-down. Apart from the
--          latch, so that a count-down sent again after its latch opened and
--          was set again for the next phase still counts nothing
-- ARGV[1]  id of this count-down: a second run of it counts nothing and
--          answers as the first
-- ARGV[2]  publish command: 'spublish' (Redis >= 7) or 'publish'
-- ARGV[3]  the latch's channel
-- ARGV[4]  how long a count-down is remembered, milliseconds
-- Returns the count left (0 for a latch that is open or not set: nothing
-- written).
local latch, counted = KEYS[1], KEYS[2]
local seen = redis.pcall('hmget', latch, 'n', 't')
local err = read_error(seen, latch, 'count-down latch')
if err then
  return err
end
-- A hash without a count is not a latch: left untouched.
if not tonumber(seen[1]) and redis.call('exists', latch) == 1 then
  return redis.error_reply('WRONGTYPE ' .. latch .. ' is not a redisync count-down latch')
end
local before = redis.pcall('hget', counted, ARGV[1])
err = read_error(before, counted, 'count-down record')
if err then
  return err
end
if before then
  return tonumber(before)
end
local left = tonumber(seen[1])
if not left or left <= 0 then
  return left or 0
end
left = left - 1
redis.call('hset', counted, ARGV[1], left)
redis.call('pexpire', counted, ARGV[4])
if left > 0 then
  redis.call('hset', latch, 'n', left)
  return left
end
redis.call('hset', latch, 'n', 0)
redis.call('pexpire', latch, redis.call('hget', latch, 't'))
redis.call(ARGV[2], ARGV[3], 'o')
return 0
