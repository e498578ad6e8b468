-- Counts a count-down latch down by one; at zero it opens: it stays, open
-- (n = 0), for its TTL again, and its waiters are woken.
-- KEYS[1]  latch hash (see latch_set_count.lua)
-- KEYS[2]  the latch's record, apart from the latch so that it outlives
--          the phase (a hash): 'c:<count-down id>' -> the count it left,
--          so a count-down sent again (its answer lost) counts once, also
--          after its phase opened and the next was set; 'o:<setting id>'
--          -> 1 for a phase that opened, so its waiters tell that from an
--          expiry after it ended. Kept ARGV[4] past the last count-down
--          and past the end of the last phase that opened
-- ARGV[1]  id of this count-down: a second run of it counts nothing and
--          answers as the first
-- ARGV[2]  publish command: 'spublish' (Redis >= 7) or 'publish'
-- ARGV[3]  the latch's channel
-- ARGV[4]  how long the record outlives what it records, milliseconds
-- Returns the count left (0 for a latch that is open or not set: nothing
-- written).
local latch, record = KEYS[1], KEYS[2]
local seen, err = read_latch(latch, record)
if err then
  return err
end
local before = redis.call('hget', record, 'c:' .. ARGV[1])
if before then
  return tonumber(before)
end
local left, id, ttl = seen[1], seen[2], seen[3]
if not left or left == 0 then
  return 0
end
left = left - 1
local text = string.format('%.0f', left)
redis.call('hset', record, 'c:' .. ARGV[1], text)
redis.call('hset', latch, 'n', text)
if left > 0 then
  keep_for(record, ARGV[4])
  return left
end
redis.call('hset', record, 'o:' .. id, 1)
keep_for(record, ttl + tonumber(ARGV[4]))
redis.call('pexpire', latch, ttl)
redis.call(ARGV[2], ARGV[3], 'o')
return 0
