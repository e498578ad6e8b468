-- Sets a count-down latch's count, unless it is counting already.
-- KEYS[1]  latch hash: n = count left, id = this setting's id, t = TTL ms,
--          p = id of the setting before it (when that one opened)
-- ARGV[1]  count (>= 1)
-- ARGV[2]  TTL, milliseconds: the latch, counting or open, ends then
-- ARGV[3]  id of this setting (unique)
-- Returns 1 set, 0 refused (it counts down still: nothing written).
local latch = KEYS[1]
local seen = redis.pcall('hmget', latch, 'n', 'id')
local err = read_error(seen, latch, 'count-down latch')
if err then
  return err
end
-- A hash without a count is not a latch: left untouched.
if not tonumber(seen[1]) and redis.call('exists', latch) == 1 then
  return redis.error_reply('WRONGTYPE ' .. latch .. ' is not a redisync count-down latch')
end
local left = tonumber(seen[1])
if left and left > 0 then
  return 0
end
-- An open latch is set again: its waiters that look only now must still
-- tell "it opened" from "it expired", so its id is kept as p.
redis.call('del', latch)
if left then
  redis.call('hset', latch, 'n', ARGV[1], 'id', ARGV[3], 't', ARGV[2], 'p', seen[2])
else
  redis.call('hset', latch, 'n', ARGV[1], 'id', ARGV[3], 't', ARGV[2])
end
redis.call('pexpire', latch, ARGV[2])
return 1
