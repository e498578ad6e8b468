-- Give back every permit of a semaphore, whoever holds them (an operator's
-- force release), keep its set-up, and wake its waiters.
-- KEYS[1]  semaphore hash (see semaphore_acquire.lua)
-- KEYS[2]  lease zset
-- ARGV[1]  publish: publish command: 'spublish' or 'publish'
-- ARGV[2]  channel: release channel
-- ARGV[3]  fence_ttl_ms: fencing counter TTL, milliseconds; unused here
--          (every kind's force-unlock is sent the same arguments)
-- Returns {1, last} if any permit was held, {0, last} if none (nothing
-- written then), `last` at least the last fencing token issued: every
-- acquisition with a token up to it ran before this script and is gone. The reads
-- validate both keys before anything is written.
local sem, leases = KEYS[1], KEYS[2]
local h = redis.pcall('hmget', sem, '~used', '~t')
local err = read_error(h, sem, 'semaphore')
if err then
  return err
end
local _, now_us = server_time()
-- At least the last token issued: '~t', or the server time in us (a token
-- is never below the time of its grant).
local used, last = h[1], math.max(tonumber(h[2] or '0') or 0, now_us)
local held = redis.pcall('zcard', leases)
err = read_error(held, leases, 'semaphore lease zset')
if err then
  return err
end
if held == 0 and tonumber(used or '0') == 0 then
  return {0, last}
end
redis.call('del', leases)
redis.call('hset', sem, '~used', 0)
redis.call('hdel', sem, '~w')
redis.call(ARGV[1], ARGV[2], 'unlock')
return {1, last}
