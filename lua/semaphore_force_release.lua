-- Give back every permit of a semaphore, whoever holds them (an operator's
-- force release), keep its set-up, and wake its waiters.
-- KEYS[1]  semaphore hash (see semaphore_acquire.lua)
-- KEYS[2]  lease zset
-- ARGV[1]  publish command: 'spublish' or 'publish'
-- ARGV[2]  release channel
-- Returns 1 if any permit was held, 0 if none (nothing written then). The
-- reads validate both keys before anything is written.
local sem, leases = KEYS[1], KEYS[2]
local used = redis.pcall('hget', sem, '~used')
local err = read_error(used, sem, 'semaphore')
if err then
  return err
end
local held = redis.pcall('zcard', leases)
err = read_error(held, leases, 'semaphore lease zset')
if err then
  return err
end
if held == 0 and tonumber(used or '0') == 0 then
  return 0
end
redis.call('del', leases)
redis.call('hset', sem, '~used', 0)
redis.call('hdel', sem, '~w')
redis.call(ARGV[1], ARGV[2], 0)
return 1
