-- Reconnection check of many locks held by one client, in one round trip:
-- lock_renew.lua's ownership check without its write, for holds whose
-- lease is fixed (nobody renews them: their lease stays as it is).
-- KEYS[i]        lock hash i
-- ARGV[2i-1]     owner id of lock i
-- ARGV[2i]       fencing token of lock i
-- Returns a list: 1 = still ours, 0 = no longer ours (expired, forced,
-- restarted). Writes nothing; a key of another type counts as not ours (0).
local result = {}
for i, lock in ipairs(KEYS) do
  local owner, token = ARGV[2 * i - 1], ARGV[2 * i]
  local ok = 0
  if redis.call('type', lock).ok == 'hash' then
    local held = redis.call('hmget', lock, owner, '~t')
    if held[1] and held[2] == token then
      ok = 1
    end
  end
  result[i] = ok
end
return result
