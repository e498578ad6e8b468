-- Watchdog renewal of read and write holds in one round trip.
-- KEYS[2i-1]  hash of hold i;  KEYS[2i]  its readers zset
-- ARGV[1]     lease, milliseconds
-- ARGV[3i-1], ARGV[3i], ARGV[3i+1]  owner, token, side ('r' or 'w') of hold i
-- Returns one flag per hold: 1 renewed, 0 gone (never re-created). A lease
-- is only ever raised (a reader's end and the keys' PTTL), never cut: the
-- guards' local estimates, which only grow, then never run past Redis.
local lease = tonumber(ARGV[1])
local t = redis.call('time')
local until_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + lease
local result = {}
for i = 1, #KEYS / 2 do
  local h, readers = KEYS[2 * i - 1], KEYS[2 * i]
  local owner, token, side = ARGV[3 * i - 1], ARGV[3 * i], ARGV[3 * i + 1]
  local ok = 0
  if redis.call('type', h).ok == 'hash' then
    if side == 'w' then
      local held = redis.call('hmget', h, 'w:' .. owner, '~t')
      if held[1] and held[2] == token then
        ok = 1
      end
    else
      local held = redis.call('hmget', h, 'r:' .. owner, 't:' .. owner)
      if held[1] and held[2] == token and redis.call('zscore', readers, owner) then
        -- reintroduce: rw-renew-lowers-read-lease
        redis.call('zadd', readers, 'XX', 'GT', until_ms, owner)
        ok = 1
      end
    end
    if ok == 1 then
      for _, k in ipairs({h, readers}) do
        local pttl = redis.call('pttl', k)
        -- '<=': a renewal in the millisecond of a hand-off (PTTL = lease)
        -- still writes, so a WAIT after it covers the hand-off (replica
        -- sync), as lock_renew.lua does.
        if pttl ~= -2 and pttl <= lease then
          redis.call('pexpire', k, lease)
        end
      end
    end
  end
  result[i] = ok
end
return result
