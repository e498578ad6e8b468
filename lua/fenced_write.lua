-- Write, or claim, a fenced value: a value whose writers hold a lock and
-- pass its fencing token, so a writer whose lock was lost (a pause, a
-- partition) cannot overwrite what a later holder read or wrote.
-- KEYS[1]  the value: hash 'value' -> the bytes, 'token' -> the newest token
--          seen (of the last write or claim)
-- ARGV[1]  token: token (decimal, below 2^53)
-- ARGV[2]  mode: 'write' or 'claim'
-- ARGV[3]  value.bytes: the value to write (write only; a claim sends two
--          arguments)
-- Returns {1, false} written; {1, value or false} claimed (the token is
-- raised, the value is returned as it is); {0, newest token} refused: a
-- newer token came first, nothing written. The newest token itself is
-- accepted (the same acquisition again). A key of another type, or a token
-- field that is not a number, is an error naming the key.
local key, token = KEYS[1], tonumber(ARGV[1])
local h = redis.pcall('hmget', key, 'token', 'value')
local err = read_error(h, key, 'fenced value')
if err then
  return err
end
local newest = h[1] and tonumber(h[1])
if h[1] and not newest then
  return redis.error_reply('WRONGTYPE ' .. key .. ' has a token field that is not a number: not a redisync fenced value')
end
if newest and token < newest then
  return {0, h[1]}
end
if ARGV[2] == 'write' then
  redis.call('hset', key, 'value', ARGV[3], 'token', ARGV[1])
  return {1, false}
end
if not newest or token > newest then
  redis.call('hset', key, 'token', ARGV[1])
end
return {1, h[2]}
