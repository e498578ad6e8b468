-- Give back the permits of one acquisition and wake waiters.
-- KEYS[1]  semaphore hash
-- KEYS[2]  lease zset
-- ARGV[1]  permit id
-- ARGV[2]  publish command
-- ARGV[3]  release channel
-- Returns the permits given back, 0 if the acquisition is not held (expired
-- and reclaimed, or released already): nothing written then.
-- The reads validate both keys before anything is written.
local n = redis.pcall('hget', KEYS[1], ARGV[1])
local err = read_error(n, KEYS[1], 'semaphore')
if err then
  return err
end
if not n then
  return 0
end
err = read_error(redis.pcall('zscore', KEYS[2], ARGV[1]), KEYS[2], 'semaphore lease zset')
if err then
  return err
end
redis.call('hdel', KEYS[1], ARGV[1])
redis.call('zrem', KEYS[2], ARGV[1])
redis.call('hincrby', KEYS[1], '~used', -tonumber(n))
redis.call(ARGV[2], ARGV[3], n)
return tonumber(n)
