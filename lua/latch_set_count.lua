-- Sets a count-down latch's count, unless it is counting already.
-- KEYS[1]  latch hash: n = count left, id = this setting's id, t = TTL ms;
--          'm:<member>' for each member that counted down in this phase
--          (see latch_count_down.lua): a new phase starts without them
-- KEYS[2]  the latch's record (see latch_count_down.lua): only checked here
-- ARGV[1]  count: count (>= 1)
-- ARGV[2]  ttl_ms: TTL, milliseconds: the latch, counting or open, ends
--          then
-- ARGV[3]  id: id of this setting (unique)
-- Returns 1 set, 0 refused (it counts down still: nothing written).
local latch = KEYS[1]
local seen, err = read_latch(latch, KEYS[2])
if err then
  return err
end
if seen[1] and seen[1] > 0 then
  return 0
end
if seen[1] then
  redis.call('del', latch)
end
redis.call('hset', latch, 'n', ARGV[1], 'id', ARGV[3], 't', ARGV[2])
redis.call('pexpire', latch, ARGV[2])
return 1
