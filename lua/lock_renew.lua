-- Watchdog renewal of many locks held by one client, in one round trip.
-- KEYS[i]        lock hash i
-- ARGV[1]        lease, milliseconds
-- ARGV[2i]       owner id of lock i
-- ARGV[2i+1]     fencing token of lock i
-- Returns a list: 1 = renewed (PTTL = max(PTTL, lease)), 0 = no longer ours
-- (expired, forced, restarted): never recreates or deletes anything.
-- A key of another type counts as lost (0), it is not touched.
local lease = tonumber(ARGV[1])
local result = {}
for i, lock in ipairs(KEYS) do
  local owner, token = ARGV[2 * i], ARGV[2 * i + 1]
  local ok = 0
  if redis.call('type', lock).ok == 'hash' then
    local held = redis.call('hmget', lock, owner, '~t')
    if held[1] and held[2] == token then
      -- '<=': a renewal right after a hand-off (PTTL = lease, same ms)
      -- still writes, so a WAIT after it covers the hand-off.
      -- reintroduce: lock-renew-lowers-lease
      if redis.call('pttl', lock) <= lease then
        redis.call('pexpire', lock, lease)
      end
      ok = 1
    end
  end
  result[i] = ok
end
return result
