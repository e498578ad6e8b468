-- Reconnection check of many semaphore acquisitions in one round trip:
-- semaphore_renew.lua's check without its write, for acquisitions whose
-- lease is fixed (nobody renews them: their lease stays as it is).
-- KEYS[i]   lease zset of acquisition i
-- ARGV[i]   permit id of acquisition i
-- Returns a list: 1 still ours, 0 gone (expired, reclaimed, released,
-- restarted). A lease whose end has passed (not reclaimed yet) counts as
-- gone. Writes nothing; a key of another type counts as gone (0).
local now = server_time()
local result = {}
for i, leases in ipairs(KEYS) do
  local ok = 0
  local ends = redis.call('type', leases).ok == 'zset' and redis.call('zscore', leases, ARGV[i])
  if ends and tonumber(ends) > now then
    ok = 1
  end
  result[i] = ok
end
return result
