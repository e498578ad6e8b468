-- Watchdog renewal of many semaphore acquisitions in one round trip.
-- KEYS[i]   lease zset of acquisition i
-- ARGV[1]   lease, milliseconds
-- ARGV[i+1] permit id of acquisition i
-- Returns a list: 1 renewed (lease end = max(its end, now + lease)), 0 gone (its
-- lease ended, reclaimed or not yet, or released). Never re-creates an
-- acquisition, nor brings back one whose lease ended: a holder's belief
-- ran out with it (and the reconnection check, semaphore_check.lua, says
-- gone too). A key of another
-- type counts as gone (0) and is not touched: the others of the batch renew.
local t = redis.call('time')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local until_ms = now_ms + tonumber(ARGV[1])
local result = {}
for i, leases in ipairs(KEYS) do
  local ok = 0
  local ends = redis.call('type', leases).ok == 'zset' and redis.call('zscore', leases, ARGV[i + 1])
  if ends and tonumber(ends) > now_ms then
    -- A renewal or an extend only ever raises a lease (a permit with a
    -- longer fixed lease keeps it). One that ends where the lease does (a
    -- hand-off in the same millisecond) still writes, one ms on, so a WAIT
    -- after it covers the hand-off, written by another connection.
    ends = tonumber(ends)
    if ends <= until_ms then
      redis.call('zadd', leases, 'XX', math.max(until_ms, ends + 1), ARGV[i + 1])
      -- The zset lives as long as its last lease (see keep_at_least).
      keep_at_least(leases, math.max(until_ms, ends + 1) - until_ms + tonumber(ARGV[1]), false)
    end
    ok = 1
  end
  result[i] = ok
end
return result
