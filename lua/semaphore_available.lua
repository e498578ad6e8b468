-- Permits free now, after reclaiming expired acquisitions.
-- KEYS[1]  semaphore hash
-- KEYS[2]  lease zset
-- ARGV[1]  publish: publish command
-- ARGV[2]  channel: release channel
-- Returns {1, free} or {-1, 0} when not initialised. Reclaimed permits are
-- announced (waiters may take them).
local sem, leases = KEYS[1], KEYS[2]
local h = redis.pcall('hmget', sem, '~permits', '~used')
local err = read_error(h, sem, 'semaphore')
if err then
  return err
end
if not h[1] then
  return {-1, 0}
end
local now = server_time()
local used, _, reclaimed
used, _, reclaimed, err = reclaim_expired(leases, tonumber(h[2] or '0'), now)
if err then
  return err
end
if reclaimed then
  redis.call('hset', sem, '~used', used)
  redis.call(ARGV[1], ARGV[2], 'unlock')
end
return {1, tonumber(h[1]) - used}
