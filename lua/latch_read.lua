-- Reads a count-down latch for its waiters. Writes nothing.
-- KEYS[1]  latch hash (see latch_set_count.lua)
-- Returns {count left, id, id of the setting before, TTL left ms}: count -1
-- when the latch is not set (or expired); ids false when missing.
local latch = KEYS[1]
local seen = redis.pcall('hmget', latch, 'n', 'id', 'p')
local err = read_error(seen, latch, 'count-down latch')
if err then
  return err
end
-- A hash without a count is not a latch: left untouched.
if not tonumber(seen[1]) and redis.call('exists', latch) == 1 then
  return redis.error_reply('WRONGTYPE ' .. latch .. ' is not a redisync count-down latch')
end
if not seen[1] then
  return {-1, false, false, -2}
end
return {tonumber(seen[1]), seen[2], seen[3], redis.call('pttl', latch)}
