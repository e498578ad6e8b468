-- Read-only view of a lock for one owner.
-- KEYS[1]  lock hash
-- ARGV[1]  owner id
-- Returns {locked 0/1, pttl ms (-2 when unlocked), hold count of the owner}.
-- A key of another type is an error.
local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then
  return {0, -2, 0}
end
if kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' is a ' .. kind .. ', not a redisync lock')
end
return {1, redis.call('pttl', KEYS[1]), tonumber(redis.call('hget', KEYS[1], ARGV[1]) or '0')}
