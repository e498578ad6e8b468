-- Delete a read-write lock whoever holds it (all readers and the writer).
-- KEYS[1]  hash;  KEYS[2]  readers zset;  KEYS[3]  channel
-- ARGV[1]  publish command
-- Returns 1 if it was locked, 0 if not. A key of another type is an error.
local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then
  redis.call('del', KEYS[2])
  return 0
end
if kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' is a ' .. kind .. ', not a redisync read-write lock')
end
redis.call('del', KEYS[1], KEYS[2])
redis.call(ARGV[1], KEYS[3], 'released')
return 1
