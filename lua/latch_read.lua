-- Reads a count-down latch for its waiters. Writes nothing.
-- KEYS[1]  latch hash (see latch_set_count.lua)
-- KEYS[2]  the latch's record (see latch_count_down.lua)
-- ARGV[1]  phase: id of the phase the caller waits for, or '' (none seen
--          yet)
-- Returns {count left, id, TTL left ms, 1 if the phase ARGV[1] opened else
-- 0}: count -1 when the latch is not set (or expired), id false then.
local latch, record = KEYS[1], KEYS[2]
local seen, err = read_latch(latch, record)
if err then
  return err
end
local opened = 0
if ARGV[1] ~= '' and redis.call('hexists', record, 'o:' .. ARGV[1]) == 1 then
  opened = 1
end
if not seen[1] then
  return {-1, false, -2, opened}
end
return {seen[1], seen[2], redis.call('pttl', latch), opened}
