-- Give back the permits of one acquisition and wake waiters.
-- KEYS[1]  semaphore hash
-- KEYS[2]  lease zset
-- KEYS[3]  release channel
-- ARGV[1]  permit id
-- ARGV[2]  publish command
-- Returns the permits given back, 0 if the acquisition is not held (expired
-- and reclaimed, or released already): nothing written then.
local n = redis.call('hget', KEYS[1], ARGV[1])
if not n then
  return 0
end
redis.call('hdel', KEYS[1], ARGV[1])
redis.call('zrem', KEYS[2], ARGV[1])
redis.call('hincrby', KEYS[1], '~used', -tonumber(n))
redis.call(ARGV[2], KEYS[3], n)
return tonumber(n)
