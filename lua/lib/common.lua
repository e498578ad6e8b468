-- Shared functions: type checks, the server clock, TTLs kept, leaving a
-- wait queue. Not a script of its own: crates/redisync/src/redis/script.rs
-- says which helper files of lua/lib/ each script of lua/ is made of; a
-- helper file uses only functions of the files listed before it there.

-- Validation before any write: the first of {key1, type1, key2, type2, ...}
-- that exists with another type, as an error reply naming that key, or nil.
local function wrong_type(spec)
  for i = 1, #spec, 2 do
    local kind = redis.call('type', spec[i]).ok
    if kind ~= 'none' and kind ~= spec[i + 1] then
      return redis.error_reply('WRONGTYPE ' .. spec[i] .. ' is a ' .. kind .. ', not a redisync ' .. spec[i + 1])
    end
  end
  return nil
end

-- The error reply naming `key` when `reply` (of a redis.pcall read of it)
-- is an error (a key of another type), or nil: one read both reads and
-- validates, with no TYPE call on the hot path. Any other error (OOM on a
-- write) is the server's own, passed on as it is.
local function read_error(reply, key, want)
  if type(reply) == 'table' and reply.err then
    if string.sub(reply.err, 1, 9) ~= 'WRONGTYPE' then
      return redis.error_reply(reply.err)
    end
    return redis.error_reply('WRONGTYPE ' .. key .. ' is not a redisync ' .. want)
  end
  return nil
end

-- The server clock: milliseconds and microseconds.
local function server_time()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Keeps `key` for at least `ms` from now (never shortens its TTL): one
-- PEXPIRE for a key the script just `created` (no TTL yet), one PEXPIRE ..
-- GT when the server has it (`gt`: Redis >= 7), a look at its PTTL first
-- otherwise.
local function keep_for(key, ms, created, gt)
  if created then
    redis.call('pexpire', key, ms)
  elseif gt then
    redis.call('pexpire', key, ms, 'GT')
  elseif redis.call('pttl', key) < tonumber(ms) then
    redis.call('pexpire', key, ms)
  end
end

-- Keeps `key` for at least `ms` from now, never shorter, also when it has
-- no TTL yet: a semaphore's lease zset (the lease just written there: it
-- expires when its last lease ended, so the entry of a crashed holder that
-- nobody reclaims does not stay for ever; the permits in use then count as
-- none, see reclaim_expired) and its wait queue. One PEXPIRE for a key the
-- caller just `created`; on Redis >= 7 (`gt`) PEXPIRE .. GT and PEXPIRE ..
-- NX (a key without a TTL), the one the caller thinks `likely_new` first;
-- else a look at the PTTL.
local function keep_at_least(key, ms, gt, created, likely_new)
  if created then
    redis.call('pexpire', key, ms)
  elseif gt then
    local first_try, then_try = 'GT', 'NX'
    if likely_new then
      first_try, then_try = 'NX', 'GT'
    end
    if redis.call('pexpire', key, ms, first_try) == 0 then
      redis.call('pexpire', key, ms, then_try)
    end
  else
    local ttl = redis.call('pttl', key)
    if ttl == -1 or ttl < tonumber(ms) then
      redis.call('pexpire', key, ms)
    end
  end
end

-- Removes every entry of the wait queue `queue` (`entries`: the list as
-- read) that ends with `suffix` (" <owner>": the waiter's entries, whatever
-- deadline, lease and number they carry); returns whether one was there.
local function leave_queue(queue, entries, suffix)
  local left = false
  for _, entry in ipairs(entries) do
    if string.sub(entry, -#suffix) == suffix then
      redis.call('lrem', queue, 0, entry)
      left = true
    end
  end
  return left
end
