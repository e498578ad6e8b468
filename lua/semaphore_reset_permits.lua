-- Set a semaphore's permits whether or not some were set (set_permits).
-- KEYS[1]  semaphore hash (see semaphore_set_permits.lua)
-- ARGV[1]  permits: permits (> 0)
-- ARGV[2]  publish: publish command
-- ARGV[3]  channel: release channel
-- Returns the previous total, 0 if none was set. Acquisitions are left as
-- they are: below what is in use, new ones wait until enough are given
-- back. Waiters are woken when the total rises. A key of another type is an
-- error naming it, before anything is written.
local sem = KEYS[1]
local err = wrong_type({sem, 'hash'})
if err then
  return err
end
local total = tonumber(ARGV[1])
local old = tonumber(redis.call('hget', sem, '~permits') or '0')
redis.call('hset', sem, '~permits', ARGV[1])
redis.call('hsetnx', sem, '~used', 0)
if total > old then
  redis.call(ARGV[2], ARGV[3], 'unlock')
end
return old
