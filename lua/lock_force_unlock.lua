-- Delete a lock whoever holds it and wake its waiters.
-- KEYS[1]  lock hash
-- KEYS[2]  unlock channel
-- ARGV[1]  publish command: 'spublish' or 'publish'
-- Returns 1 if it was locked, 0 if not. A key of another type is an error.
local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then
  return 0
end
if kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' is a ' .. kind .. ', not a redisync lock')
end
redis.call('del', KEYS[1])
redis.call(ARGV[1], KEYS[2], 'unlock')
return 1
