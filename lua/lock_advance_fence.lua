-- Raise a lock's fencing counter to at least a value (Redlock writes the
-- highest token of its majority back, so any later majority sees it).
-- KEYS[1]  fencing counter
-- ARGV[1]  minimum value (a decimal integer)
-- Returns the counter after the call. A non-integer counter is an error.
local current = tonumber(redis.call('get', KEYS[1]) or '0')
if current == nil then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' is not a redisync fencing counter')
end
local wanted = tonumber(ARGV[1])
if wanted > current then
  redis.call('set', KEYS[1], ARGV[1])
  return wanted
end
return current
