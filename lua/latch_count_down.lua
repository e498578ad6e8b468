-- Counts a count-down latch down by one; at zero it opens: it stays, open
-- (n = 0), for its TTL again, and its waiters are woken.
-- KEYS[1]  latch hash (see latch_set_count.lua); 'm:<member>' -> 1 for a
--          member that counted down in this phase
-- KEYS[2]  the latch's record, apart from the latch so that it outlives
--          the phase (a hash): 'c:<count-down id>' -> the count it left,
--          so a count-down sent again (its answer lost) counts once, also
--          after its phase opened and the next was set; 'o:<setting id>'
--          -> 1 for a phase that opened, so its waiters tell that from an
--          expiry after it ended
-- KEYS[3]  the record's index (a zset): record field -> when it may be
--          forgotten (server ms): a 'c:' field ARGV[4] after its
--          count-down, an 'o:' field ARGV[4] after the open latch ends.
--          Each count-down forgets the fields that ended first; both keys
--          expire when the last field would be forgotten
-- ARGV[1]  id: id of this count-down: a second run of it counts nothing
--          and answers as the first
-- ARGV[2]  publish: publish command: 'spublish' (Redis >= 7) or 'publish'
-- ARGV[3]  channel: the latch's channel
-- ARGV[4]  record_for_ms: how long the record outlives what it records,
--          milliseconds
-- ARGV[5]  member: the member counting down, or '' (none): a member counts
--          once per phase
-- Returns the count left (0 for an open latch: nothing written; for a
-- member that counted in this phase already, the count left, nothing
-- written), or -1 for a latch that is not set (nothing written).
local latch, record, forget = KEYS[1], KEYS[2], KEYS[3]
local seen, err = read_latch(latch, record, forget)
if err then
  return err
end
local before = redis.call('hget', record, 'c:' .. ARGV[1])
if before then
  return tonumber(before)
end
local left, id, ttl = seen[1], seen[2], seen[3]
if not left then
  return -1
end
if left == 0 then
  return 0
end
local member = ARGV[5]
if member ~= '' and redis.call('hexists', latch, 'm:' .. member) == 1 then
  return left
end
local now = server_time()
local keep = tonumber(ARGV[4])
forget_old(record, forget, now)
left = left - 1
local text = string.format('%.0f', left)
redis.call('hset', record, 'c:' .. ARGV[1], text)
redis.call('zadd', forget, now + keep, 'c:' .. ARGV[1])
if member ~= '' then
  redis.call('hset', latch, 'n', text, 'm:' .. member, 1)
else
  redis.call('hset', latch, 'n', text)
end
if left > 0 then
  keep_for(record, keep)
  keep_for(forget, keep)
  return left
end
redis.call('hset', record, 'o:' .. id, 1)
redis.call('zadd', forget, now + ttl + keep, 'o:' .. id)
keep_for(record, ttl + keep)
keep_for(forget, ttl + keep)
redis.call('pexpire', latch, ttl)
redis.call(ARGV[2], ARGV[3], 'o')
return 0
