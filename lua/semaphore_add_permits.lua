-- Add permits to (or, with a negative delta, remove permits from) a
-- semaphore's total (add_permits).
-- KEYS[1]  semaphore hash (see semaphore_set_permits.lua)
-- ARGV[1]  delta: delta (an integer other than 0)
-- ARGV[2]  max_total: largest total allowed
-- ARGV[3]  publish: publish command
-- ARGV[4]  channel: release channel
-- Returns {1, new total}; {-1, 0} not initialised; {-2, total} the new total
-- would be below 1 or above ARGV[2] (the current total returned, nothing
-- written). Acquisitions are left as they are: below what is in use, new
-- ones wait until enough are given back. Waiters are woken when permits are
-- added. A key of another type is an error naming it, before anything is
-- written.
local sem = KEYS[1]
local err = wrong_type({sem, 'hash'})
if err then
  return err
end
local total = redis.call('hget', sem, '~permits')
if not total then
  return {-1, 0}
end
total = tonumber(total)
local delta = tonumber(ARGV[1])
local new = total + delta
if new < 1 or new > tonumber(ARGV[2]) then
  return {-2, total}
end
new = redis.call('hincrby', sem, '~permits', ARGV[1])
if delta > 0 then
  redis.call(ARGV[3], ARGV[4], 'unlock')
end
return {1, new}
