-- Permits free now, after reclaiming expired acquisitions.
-- KEYS[1]  semaphore hash
-- KEYS[2]  lease zset
-- ARGV[1]  publish command
-- ARGV[2]  release channel
-- Returns {1, free} or {-1, 0} when not initialised.
local sem, leases = KEYS[1], KEYS[2]
local err = wrong_type({sem, 'hash', leases, 'zset'})
if err then
  return err
end
local total = redis.call('hget', sem, '~permits')
if not total then
  return {-1, 0}
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('zrangebyscore', leases, '-inf', now)
if #expired > 0 then
  local freed = 0
  for _, old in ipairs(expired) do
    freed = freed + tonumber(redis.call('hget', sem, old) or '0')
    redis.call('hdel', sem, old)
  end
  redis.call('zremrangebyscore', leases, '-inf', now)
  redis.call('hincrby', sem, '~used', -freed)
  redis.call(ARGV[1], ARGV[2], freed)
end
return {1, tonumber(total) - tonumber(redis.call('hget', sem, '~used') or '0')}
