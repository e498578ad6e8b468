-- Give back the permits of one acquisition.
-- KEYS[1]  semaphore hash (see semaphore_acquire.lua)
-- KEYS[2]  lease zset
-- ARGV[1]  permit id
-- ARGV[2]  publish command
-- ARGV[3]  release channel
-- Returns the permits given back, 0 if the acquisition is not held (expired
-- and reclaimed, or released already): nothing written then. Publishes
-- only when a client other than the releasing one marked '~w' (its waiters
-- need the message; the releasing client wakes its own).
-- The reads validate both keys before anything is written.
local sem, leases, id = KEYS[1], KEYS[2], ARGV[1]
local h = redis.pcall('hmget', sem, '~used', '~w')
local err = read_error(h, sem, 'semaphore')
if err then
  return err
end
local gone = redis.pcall('zrem', leases, id)
err = read_error(gone, leases, 'semaphore lease zset')
if err then
  return err
end
if gone == 0 then
  return 0
end
local n = permits_of(id)
redis.call('hset', sem, '~used', math.max(0, tonumber(h[1] or '0') - n))
if h[2] and h[2] ~= client_of(id) then
  redis.call('hdel', sem, '~w')
  redis.call(ARGV[2], ARGV[3], n)
end
return n
