-- Reconnection check of read and write holds in one round trip:
-- rw_lock_renew.lua's ownership check without its writes, for holds whose
-- lease is fixed (nobody renews them: their lease stays as it is).
-- KEYS[2i-1]  hash of hold i;  KEYS[2i]  its readers zset
-- ARGV[3i-2], ARGV[3i-1], ARGV[3i]  owner, token, side ('r' or 'w') of hold i
-- Returns one flag per hold: 1 still ours, 0 gone. A reader whose lease
-- end has passed (not reclaimed yet) counts as gone. Writes nothing; keys
-- of another type count as gone (0).
local now = server_time()
local result = {}
for i = 1, #KEYS / 2 do
  local h, readers = KEYS[2 * i - 1], KEYS[2 * i]
  local owner, token, side = ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]
  local ok = 0
  if redis.call('type', h).ok == 'hash' then
    if side == 'w' then
      local held = redis.call('hmget', h, 'w:' .. owner, '~t')
      if held[1] and held[2] == token then
        ok = 1
      end
    elseif redis.call('type', readers).ok == 'zset' then
      local held = redis.call('hmget', h, 'r:' .. owner, 't:' .. owner)
      local ends = held[1] and held[2] == token and redis.call('zscore', readers, owner)
      if ends and tonumber(ends) > now then
        ok = 1
      end
    end
  end
  result[i] = ok
end
return result
