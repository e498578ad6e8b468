-- Initialise a semaphore's permits once.
-- KEYS[1]  semaphore hash (see semaphore_acquire.lua)
-- ARGV[1]  permits: permits (> 0)
-- ARGV[2]  publish: publish command
-- ARGV[3]  channel: release channel
-- Returns 1 if set, 0 if the semaphore already had permits (unchanged).
local err = wrong_type({KEYS[1], 'hash'})
if err then
  return err
end
if redis.call('hexists', KEYS[1], '~permits') == 1 then
  return 0
end
redis.call('hset', KEYS[1], '~permits', ARGV[1], '~used', 0)
redis.call(ARGV[2], ARGV[3], 'unlock')
return 1
