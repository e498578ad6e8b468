-- Take the read or the write side of a read-write lock (re-entrant per owner).
-- KEYS[1]  hash: '~mode' 'read'|'write'; 'w:<owner>' write holds, '~t' the
--          writer's token; 'r:<owner>' read holds, 't:<owner>' that reader's token
-- KEYS[2]  readers zset: <owner> -> end of that reader's lease (server ms)
-- KEYS[3]  fencing counter (TTL ARGV[5]; see next_token in prelude.lua)
-- KEYS[4]  waiting writers zset: <owner> -> end of that writer's mark
--          (server ms); while a live mark of another owner is there, new
--          readers wait (writer preference)
-- ARGV[1]  owner id
-- ARGV[2]  lease, milliseconds
-- ARGV[3]  'r' read or 'w' write
-- ARGV[4]  token of the hold the caller re-enters on that side, or '' for a
--          fresh acquisition: a field of this owner with another token was
--          left by a release that never arrived and is replaced, with a new
--          token, so nothing carrying the old token matches it any more
-- ARGV[5]  fencing counter TTL, milliseconds
-- ARGV[6]  '1': a busy writer marks itself waiting (a zero wait does not)
-- ARGV[7]  how long a writer's mark lives unless the writer refreshes it
--          (each attempt does), milliseconds
-- Returns {1, token} acquired, {2, token} re-entered, {0, ms} busy (ms to
-- wait at most), {-3, 0} write asked by an owner holding only a read lock
-- (an upgrade would deadlock: refused). Readers whose lease ended (crashed)
-- and writers' marks that ran out are dropped first.
-- New readers wait behind a waiting writer, so a stream of readers cannot
-- starve writers; an owner that reads already re-enters (it would wait for
-- itself otherwise), and a writer reads at once (a downgrade).
local h, readers, fence, writers = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, lease, side, reentry = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local enqueue, mark_ms = ARGV[6] == '1', tonumber(ARGV[7])
local err = wrong_type({h, 'hash', readers, 'zset', writers, 'zset'})
if err then
  return err
end
local counter
counter, err = read_fence(fence)
if err then
  return err
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local expired = redis.call('zrangebyscore', readers, '-inf', now)
for _, gone in ipairs(expired) do
  redis.call('hdel', h, 'r:' .. gone, 't:' .. gone)
end
if #expired > 0 then
  redis.call('zremrangebyscore', readers, '-inf', now)
end
redis.call('zremrangebyscore', writers, '-inf', now)
local mode = redis.call('hget', h, '~mode')
if mode == 'read' and redis.call('zcard', readers) == 0 then
  redis.call('del', h)
  mode = false
end

local function token()
  return next_token(fence, ARGV[5], counter)
end

-- The hash and the readers zset live at least as long as any lease in them.
local function cover()
  for _, k in ipairs({h, readers}) do
    local pttl = redis.call('pttl', k)
    if pttl ~= -2 and pttl < lease then
      redis.call('pexpire', k, lease)
    end
  end
end

-- Busy for a writer: mark it waiting (refreshed by each attempt).
local function writer_waits(ms)
  if enqueue then
    redis.call('zadd', writers, now + mark_ms, owner)
    if redis.call('pttl', writers) < mark_ms then
      redis.call('pexpire', writers, mark_ms)
    end
  end
  return {0, ms}
end

if side == 'w' then
  if not mode then
    local n = token()
    redis.call('hset', h, '~mode', 'write', 'w:' .. owner, 1, '~t', string.format('%.0f', n))
    redis.call('zrem', writers, owner)
    cover()
    return {1, n}
  end
  if mode == 'write' then
    if redis.call('hexists', h, 'w:' .. owner) == 1 then
      if redis.call('hget', h, '~t') ~= reentry then
        local n = token()
        redis.call('hset', h, 'w:' .. owner, 1, '~t', string.format('%.0f', n))
        cover()
        return {1, n}
      end
      redis.call('hincrby', h, 'w:' .. owner, 1)
      cover()
      return {2, tonumber(redis.call('hget', h, '~t'))}
    end
    return writer_waits(redis.call('pttl', h))
  end
  if redis.call('hexists', h, 'r:' .. owner) == 1 then
    return {-3, 0}
  end
  local first = redis.call('zrange', readers, 0, 0, 'WITHSCORES')
  return writer_waits(math.max(0, tonumber(first[2]) - now))
end

-- Read side: free, read mode, or write mode held by this owner (downgrade).
if mode == 'write' and redis.call('hexists', h, 'w:' .. owner) == 0 then
  return {0, redis.call('pttl', h)}
end
local until_ms = now + lease
local reenters = redis.call('hexists', h, 'r:' .. owner) == 1 and redis.call('hget', h, 't:' .. owner) == reentry
if not reenters and mode ~= 'write' then
  -- A new reader: behind any writer (another owner) still waiting. Retry
  -- when the first mark would run out (its writer may have crashed).
  local marks = redis.call('zcard', writers)
  if marks > 0 and not (marks == 1 and redis.call('zscore', writers, owner)) then
    local first = redis.call('zrange', writers, 0, 0, 'WITHSCORES')
    return {0, math.max(0, tonumber(first[2]) - now)}
  end
end
if reenters then
  redis.call('hincrby', h, 'r:' .. owner, 1)
  if tonumber(redis.call('zscore', readers, owner) or '0') < until_ms then
    redis.call('zadd', readers, until_ms, owner)
  end
  cover()
  return {2, tonumber(redis.call('hget', h, 't:' .. owner))}
end
local n = token()
if not mode then
  redis.call('hset', h, '~mode', 'read')
end
redis.call('hset', h, 'r:' .. owner, 1, 't:' .. owner, string.format('%.0f', n))
redis.call('zadd', readers, until_ms, owner)
cover()
return {1, n}
