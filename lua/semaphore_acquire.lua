-- Take permits of a lease-bound semaphore.
-- KEYS[1]  semaphore hash (see semaphore_set_permits.lua)
-- KEYS[2]  lease zset: <permit id> -> lease end, server time in ms
-- KEYS[3]  fencing counter (TTL ARGV[4]; see next_token in prelude.lua)
-- ARGV[1]  permit id (unique per acquisition)
-- ARGV[2]  permits wanted (> 0)
-- ARGV[3]  lease, milliseconds
-- ARGV[4]  fencing counter TTL, milliseconds
-- Returns {1, token} acquired; {0, ms} busy, ms until the earliest lease ends
-- (-1 when none ends); {-1, 0} not initialised; {-2, total} more permits than
-- the semaphore has. Expired acquisitions (crashed holders) are reclaimed
-- first. A key of another type is an error naming it, before anything is
-- written (permits included).
local sem, leases, fence = KEYS[1], KEYS[2], KEYS[3]
local id, wanted, lease = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
-- Each read validates its key's type (an error reply names it) before
-- anything is written.
local counts = redis.pcall('hmget', sem, '~permits', '~used')
local err = read_error(counts, sem, 'semaphore')
if err then
  return err
end
local total, used = counts[1], tonumber(counts[2] or '0')
local counter
counter, err = read_fence(fence)
if err then
  return err
end

if not total then
  return {-1, 0}
end
total = tonumber(total)
if wanted > total then
  return {-2, total}
end
local now, now_us = server_time()

local expired = redis.pcall('zrangebyscore', leases, '-inf', now)
err = read_error(expired, leases, 'semaphore lease zset')
if err then
  return err
end
if #expired > 0 then
  local freed = 0
  for _, old in ipairs(expired) do
    freed = freed + tonumber(redis.call('hget', sem, old) or '0')
    redis.call('hdel', sem, old)
  end
  redis.call('zremrangebyscore', leases, '-inf', now)
  redis.call('hincrby', sem, '~used', -freed)
  used = used - freed
end

if total - used >= wanted then
  local token = next_token(fence, ARGV[4], counter, nil, now_us)
  redis.call('hset', sem, id, wanted)
  redis.call('hincrby', sem, '~used', wanted)
  redis.call('zadd', leases, now + lease, id)
  return {1, token}
end
local first = redis.call('zrange', leases, 0, 0, 'WITHSCORES')
if first[2] then
  return {0, math.max(0, tonumber(first[2]) - now)}
end
return {0, -1}
