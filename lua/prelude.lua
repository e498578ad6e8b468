-- Shared functions, prepended to every script of this directory (they run
-- as one EVALSHA). Not a script of its own.

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

-- The fencing counter (0 when missing) and nil, or nil and an error reply
-- naming it when it holds something else than an integer.
local function read_fence(fence)
  local v = redis.pcall('get', fence)
  local err = read_error(v, fence, 'fencing counter')
  if err then
    return nil, err
  end
  if not v then
    return 0, nil
  end
  local n = tonumber(v)
  if not n then
    return nil, redis.error_reply('WRONGTYPE ' .. fence .. ' is a string, not a redisync fencing counter')
  end
  return n, nil
end

-- The server clock: milliseconds and microseconds.
local function server_time()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- The restart guard of a guarded client's acquisition, before anything is
-- read or written. Its last three arguments: '~restart-guard', the bound in
-- seconds (max_lease plus a second of INFO's rounding), and the LASTSAVE
-- the client read on this server when it proved it old (or ''). LASTSAVE
-- is the server's start time or its last save: one that is neither that
-- value nor older than the bound belongs to a server that may have
-- restarted, even behind a proxy that kept the client's connection. The
-- script then does nothing, and the client reads the uptime (INFO) first.
-- reintroduce: restart-guard-per-connection-only
if #ARGV >= 3 and ARGV[#ARGV - 2] == '~restart-guard' then
  local saved = redis.call('lastsave')
  if tostring(saved) ~= ARGV[#ARGV] and tonumber(redis.call('time')[1]) - saved <= tonumber(ARGV[#ARGV - 1]) then
    return redis.error_reply('REDISYNC-RESTARTED the server may have restarted (LASTSAVE ' .. saved .. ')')
  end
end

-- A lock hash's view for an acquisition by `owner` (the lock layout: owner
-- id -> hold count, '~t' the token, '~w' somebody waits): {count, token,
-- waits} (false when missing), the lock's PTTL when it is free or the
-- caller's (nil when another owner holds it and `expect_busy`), and nil;
-- or nil, nil and the error reply naming the key. `expect_busy` (the
-- caller's last look found it held by another): the hash first; otherwise
-- the PTTL first, so a missing lock (the common, uncontended case) needs
-- no HMGET.
local function read_hold(lock, owner, expect_busy, what)
  local held, pttl = {false, false, false}, nil
  if not expect_busy then
    pttl = redis.call('pttl', lock)
    if pttl == -2 then
      return held, pttl, nil
    end
  end
  held = redis.pcall('hmget', lock, owner, '~t', '~w')
  local err = read_error(held, lock, what)
  if err then
    return nil, nil, err
  end
  if not pttl and not (held[2] and not held[1]) then
    -- Free, ours, or not one of ours after all.
    pttl = redis.call('pttl', lock)
  end
  return held, pttl, nil
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

-- At least the last fencing token issued on `fence`, for a force-unlock's
-- answer (every acquisition with a token up to it ran before the script):
-- the counter, or the server time in us when the counter expired (a token
-- is never below the time of its grant). nil and an error reply naming the
-- counter when it holds something else.
local function last_issued(fence)
  local counter, err = read_fence(fence)
  if err then
    return nil, err
  end
  local _, now_us = server_time()
  return math.max(counter, now_us), nil
end

-- The fencing token after `last`: max(last + 1, server time in
-- microseconds); see next_token.
local function token_after(last, now_us)
  -- reintroduce: token-counter-only
  return math.max(last + 1, now_us)
end

-- Issues a fencing token: max(counter + 1, server time in microseconds),
-- kept by the counter for ttl_ms. Tokens so never go back when the counter
-- is lost or behind (restart from an older snapshot, failover to a replica
-- that missed increments, expiry), as long as the server clock does not
-- step back, around the loss, by more than the time between the last token
-- before it and the first after. Microsecond times stay exact in Lua
-- numbers (below 2^53) until the year 2255. `current` is the counter as
-- read_fence returned it (scripts read it first, before any write).
--
-- `floor` (optional, a decimal string or nil): the caller's lower bound,
-- honoured when it is at most one second ahead of the server clock. A
-- Redlock passes the same floor to every node, so that their tokens agree
-- and no write-back round trip is needed.
--
-- `now_us` (optional): the server time the script read already (saves a
-- TIME call).
local function next_token(fence, ttl_ms, current, floor, now_us)
  if not now_us then
    local _
    _, now_us = server_time()
  end
  local n = token_after(current, now_us)
  local wanted = tonumber(floor)
  if wanted and wanted > n and wanted <= now_us + 1000000 then
    n = wanted
  end
  redis.call('set', fence, string.format('%.0f', n), 'PX', ttl_ms)
  return n
end


-- Semaphores. A permit id is "<client uuid>:<owner tag>:<n>#<permits>": the
-- lease zset alone tells what a crashed holder held.

-- The permits a permit id holds, or 0 for a malformed id.
local function permits_of(id)
  return tonumber(string.match(id, '#(%d+)$')) or 0
end

-- The client uuid of a permit id (its first 36 characters).
local function client_of(id)
  return string.sub(id, 1, 36)
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

-- Reclaims the permits of acquisitions whose lease ended by `now` (crashed
-- holders). `used`: the permits in use before. Returns the permits in use
-- after, the earliest lease end left (nil: none), whether anything was
-- reclaimed (the caller then writes '~used') and nil; or an error reply
-- naming the lease zset as fourth value, before anything is written.
-- `first` (optional): the caller's read of the earliest lease
-- (ZRANGE 0 0 WITHSCORES), saving the script a second one.
local function reclaim_expired(leases, used, now, first)
  first = first or redis.pcall('zrange', leases, 0, 0, 'WITHSCORES')
  local err = read_error(first, leases, 'semaphore lease zset')
  if err then
    return nil, nil, false, err
  end
  if not first[2] then
    -- No lease left (the zset expired with its last lease): none in use.
    return 0, nil, used ~= 0, nil
  end
  if tonumber(first[2]) > now then
    return used, tonumber(first[2]), false, nil
  end
  for _, old in ipairs(redis.call('zrangebyscore', leases, '-inf', now)) do
    used = used - permits_of(old)
  end
  redis.call('zremrangebyscore', leases, '-inf', now)
  first = redis.call('zrange', leases, 0, 0, 'WITHSCORES')
  return math.max(0, used), tonumber(first[2]), true, nil
end


-- Locks: hand-off to the oldest waiter.

-- Hands a lock whose holder had token `token` (and token floor `floor` or
-- nil) to the head of its wait queue (entries "<lease ms> <number> <token
-- floor> <owner id>", the number naming the entry; a fair lock's entries
-- start with the waiter's queue deadline, "@<server ms> ", and one whose
-- deadline passed is a waiter that stopped refreshing its place: skipped):
-- the new holder's fencing token follows the rule of next_token from the
-- old one (never below the server time: a hold and queue brought back by a
-- restart from an older snapshot must not hand over a token below those
-- issued since) and the waiter's floor, the counter follows, and the
-- message "g:<token>:<number>:<owner>" tells the waiter, who then needs no
-- command of its own. Returns true when handed; false (nothing written) for
-- an empty queue, or when the queue or the counter holds something else:
-- the release goes on without a hand-off, and the next acquisition or
-- waiter gets the error naming the key.
local function hand_to_next(lock, queue, fence, fence_ttl, token, floor, publish, channel)
  local entry = redis.pcall('lpop', queue)
  if type(entry) == 'table' then
    return false
  end
  local now, now_us
  while entry do
    if not now then
      now, now_us = server_time()
    end
    local deadline, rest = string.match(entry, '^@(%d+) (.+)$')
    local lease, number, wanted, owner = string.match(rest or entry, '^(%d+) (%d+) (%d+) (.+)$')
    if lease and not (deadline and tonumber(deadline) < now) then
      local next = token_after(math.max(token, tonumber(floor) or 0), now_us)
      wanted = tonumber(wanted)
      if wanted > next and wanted <= now_us + 1000000 then
        next = wanted
      end
      -- SET .. GET refuses a counter of another type before writing: the
      -- entry goes back where it was, and nothing is handed.
      local counter = redis.pcall('set', fence, string.format('%.0f', next), 'PX', fence_ttl, 'GET')
      if type(counter) == 'table' and counter.err then
        if redis.call('lpush', queue, entry) == 1 then
          redis.call('pexpire', queue, lease)
        end
        return false
      end
      if (tonumber(counter) or 0) >= next then
        -- Raised past the hold's token by other means: stay above it.
        next = tonumber(counter) + 1
        redis.call('set', fence, string.format('%.0f', next), 'PX', fence_ttl)
      end
      local given = string.format('%.0f', next)
      redis.call('del', lock)
      -- '~w': more waiters may follow; the next release looks.
      redis.call('hset', lock, owner, 1, '~t', given, '~w', 1)
      redis.call('pexpire', lock, lease)
      redis.call(publish, channel, 'g:' .. given .. ':' .. number .. ':' .. owner)
      return true
    end
    -- Not one of ours, or a fair lock's waiter gone: dropped.
    entry = redis.call('lpop', queue)
  end
  return false
end


-- Releases one hold (or, `last` = '1', the owner's whole hold) of a
-- reentrant lock: lock_release.lua, and a release that lock_acquire.lua
-- carries before its own attempt (a dropped guard's, folded into the next
-- acquisition of its client). `queue` and `fence` may be nil (a release
-- while the slot migrates: waiters are woken, not handed the lock).
-- Returns 0 not held by this owner/acquisition (nothing written, nothing
-- published), 1 still held (re-entrant), 2 released (nobody had tried: no
-- waiter woken), 3 released and waiters of other clients woken (they
-- tried, none is queued), 4 handed to the oldest queued waiter; or an error
-- reply (the lock key of another type; nothing written). A released hold
-- that had published an identity (a leader's) also publishes 'i' when 2 or
-- 4, so that the election's watchers read again ('unlock' wakes them too).
local function release_lock(lock, fence, queue, owner, token, last, publish, channel, fence_ttl)
  local held = redis.pcall('hmget', lock, owner, '~t', '~w', '~f', '~i')
  local err = read_error(held, lock, 'lock')
  if err then
    return err
  end
  -- reintroduce: release-by-owner-only
  if not held[1] or held[2] ~= token then
    return 0
  end
  if last ~= '1' and tonumber(held[1]) > 1 then
    redis.call('hincrby', lock, owner, -1)
    return 1
  end
  -- Only waiters of other clients ask Redis (local ones queue in their
  -- client), and each marked '~w' when it found the lock busy.
  if not held[3] then
    redis.call('del', lock)
    if held[5] then
      -- A leader's term ended: its election's watchers read again now.
      redis.call(publish, channel, 'i')
    end
    return 2
  end
  -- Handed to the oldest queued waiter, or (nobody queued, or the queue or
  -- the counter is not ours) freed and every waiter woken.
  if queue and hand_to_next(lock, queue, fence, fence_ttl, tonumber(held[2]), held[4], publish, channel) then
    if held[5] then
      -- The hand-off's message wakes only its addressee: the watchers of
      -- an election hear that the term ended.
      redis.call(publish, channel, 'i')
    end
    return 4
  end
  redis.call('del', lock)
  redis.call(publish, channel, 'unlock')
  return 3
end

-- Semaphores: hand-off to the oldest waiters. The wait queue holds
-- "<lease ms> <number> <permit id>", oldest first (the number names the
-- entry, as a lock's).

-- '~w' after client `me` gets waiters that wait without a queue entry:
-- the one client's uuid, or '*' for several.
local function mark_with(waiting, me)
  if waiting == me or waiting == '*' then
    return waiting
  end
  return waiting and '*' or me
end

-- Hands free permits (s.total - s.used) to the queue's heads, oldest
-- first, while the head's ask fits: each is granted (its lease from now,
-- the next fencing token after s.last) and told by
-- "g:<token>:<number>/<free>:<id>" with the permits left free. A head that
-- does not fit stops it (FIFO: a large ask is never passed over); an entry
-- asking more than the total, or not one of ours, is dropped. A hand-off
-- that takes the last permit marks its client in s.mark, as a grant does
-- (its next waiter then waits for a release without asking). `me`: the
-- caller's permit id, granted without a message. Updates s.used, s.last,
-- s.mark, and s.to_others (some went to another client than s.client);
-- returns whether the queue was found empty, the token granted to
-- `me` (nil: none), and an error reply naming the queue when it is not a
-- list (then nothing was written).
local function hand_permits(s, leases, queue, publish, channel, me)
  -- The caller's grant does not stop the hand-off: entries behind it that
  -- fit in what is left get theirs too (nobody else would tell them).
  local mine = nil
  while s.total - s.used > 0 do
    local entry = redis.pcall('lpop', queue)
    if type(entry) == 'table' then
      return true, mine, read_error(entry, queue, 'semaphore queue')
    end
    if not entry then
      return true, mine
    end
    local lease, number, id = string.match(entry, '^(%d+) (%d+) (.+)$')
    local wanted = id and permits_of(id) or 0
    if wanted > 0 and wanted <= s.total then
      if wanted > s.total - s.used then
        redis.call('lpush', queue, entry)
        -- The LPOP took the last entry, so the key was made anew.
        if redis.call('pttl', queue) == -1 then
          redis.call('pexpire', queue, 2 * tonumber(lease) + 1000)
        end
        return false, mine
      end
      -- Nothing in use: the zset is likely gone with its last lease.
      local likely_new = s.used == 0
      s.used = s.used + wanted
      s.last = token_after(s.last, s.now_us)
      redis.call('zadd', leases, s.now + tonumber(lease), id)
      keep_at_least(leases, tonumber(lease), publish == 'spublish', false, likely_new)
      if s.used >= s.total then
        s.mark = mark_with(s.mark, client_of(id))
      end
      if client_of(id) ~= s.client then
        s.to_others = true
      end
      if id == me then
        mine = s.last
      else
        redis.call(publish, channel, 'g:' .. string.format('%.0f', s.last) .. ':' .. number .. '/' .. (s.total - s.used) .. ':' .. id)
      end
    end
  end
  return false, mine
end


-- Count-down latches (see latch_set_count.lua for the layout).

-- The latch hash read: {count left, id, TTL ms} (count nil when the latch
-- is not set), or nil and an error reply naming the key when it is not a
-- latch: another type, or a hash without a whole count, an id and a TTL.
local function read_latch(latch, record, forget)
  local seen = redis.pcall('hmget', latch, 'n', 'id', 't')
  local err = read_error(seen, latch, 'count-down latch')
  if err then
    return nil, err
  end
  local kind = redis.call('type', record).ok
  if kind ~= 'none' and kind ~= 'hash' then
    return nil, redis.error_reply('WRONGTYPE ' .. record .. ' is not a redisync count-down record')
  end
  if forget then
    kind = redis.call('type', forget).ok
    if kind ~= 'none' and kind ~= 'zset' then
      return nil, redis.error_reply('WRONGTYPE ' .. forget .. ' is not a redisync count-down record index')
    end
  end
  if not (seen[1] or seen[2] or seen[3]) and redis.call('exists', latch) == 0 then
    return {nil, nil, nil}, nil
  end
  local n, t = seen[1], seen[3]
  if not (n and t and seen[2] and string.match(n, '^%d+$') and string.match(t, '^%d+$')) then
    return nil, redis.error_reply('WRONGTYPE ' .. latch .. ' is not a redisync count-down latch')
  end
  return {tonumber(n), seen[2], tonumber(t)}, nil
end

-- Forgets what the latch's record (a hash) no longer needs: the fields
-- that its index `forget` (a zset: field -> when it may be forgotten,
-- server ms) says ended by `now`. Each field is forgotten once, so the
-- work is that of the writes that made them.
local function forget_old(record, forget, now)
  local old = redis.call('zrangebyscore', forget, '-inf', now)
  if #old == 0 then
    return
  end
  for i = 1, #old, 1000 do
    redis.call('hdel', record, unpack(old, i, math.min(i + 999, #old)))
  end
  redis.call('zremrangebyscore', forget, '-inf', now)
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


-- Read-write locks: hand-off to the oldest waiters. The hash: '~mode'
-- 'read' or 'write', 'w:<owner>' the writer's holds and '~t' its token,
-- 'r:<owner>' a reader's holds and 't:<owner>' its token; the readers
-- zset: <owner> -> the end of its lease (server ms); the wait queue:
-- "@<queue deadline, server ms> <lease ms> <number> <r|w> <owner>",
-- oldest first. A waiter refreshes its deadline while it waits: an entry
-- whose deadline passed is a waiter that stopped (crashed, stalled).
--
-- The scripts keep their state in a table s: s.mode the lock's mode (nil:
-- free), s.now and s.now_us the server clock, s.last the last fencing
-- token known issued, s.read whether s.last is the counter as read,
-- s.fresh[key] the TTL the script gave a key it created (true: none yet).

-- The next fencing token of a grant in a hand-off (see next_token). When
-- the counter was not read, SET .. GET reads it while setting it, and
-- refuses one of another type before writing (nil: nothing may be
-- granted). s.dirty: the counter is behind s.last (see rw_save_counter).
local function rw_token(s, fence, fence_ttl)
  local n = token_after(s.last, s.now_us)
  if s.read then
    s.dirty = true
  else
    local old = redis.pcall('set', fence, string.format('%.0f', n), 'PX', fence_ttl, 'GET')
    if type(old) == 'table' and old.err then
      return nil
    end
    s.read = true
    if (tonumber(old) or 0) >= n then
      n = tonumber(old) + 1
      s.dirty = true
    end
  end
  s.last = n
  return n
end

-- Writes the counter when rw_token left it behind.
local function rw_save_counter(s, fence, fence_ttl)
  if s.dirty then
    redis.call('set', fence, string.format('%.0f', s.last), 'PX', fence_ttl)
    s.dirty = false
  end
end

-- keep_for, remembering (s.fresh[key]) what the script already covered:
-- a key it created takes one PEXPIRE, one it covered as long takes none.
local function rw_cover(s, key, ms)
  local known = s.fresh[key]
  if known == true or not known or known < ms then
    keep_for(key, ms, known == true)
    s.fresh[key] = ms
  end
end

-- Hands a read-write lock in mode s.mode to the queue's oldest live
-- entries while they can enter: one writer when it is free, else the
-- readers ahead of the first writer while it is free or read (a waiting
-- writer holds later readers back). Each gets its own fencing token (see
-- rw_token) and the message "g:<token>:<number>:<r|w>|<owner>", so its
-- waiter wakes holding it; but the entry `me` (the caller's, as read),
-- whose token is returned instead. Dead entries and entries not of ours are
-- dropped. Stops, granting nothing more, when the readers zset or the
-- counter holds something else (the next acquisition reports it). Updates
-- s.mode, s.last and s.popped (entries taken off the head); returns the
-- token granted to `me` (nil: none) and whether an entry may still wait.
local function hand_rw(h, readers, queue, s, fence, fence_ttl, publish, channel, me)
  local mine
  while s.mode ~= 'write' do
    local entry = redis.pcall('lpop', queue)
    if type(entry) == 'table' or not entry then
      return mine, false
    end
    s.popped = s.popped + 1
    local deadline, lease, number, side, owner = string.match(entry, '^@(%d+) (%d+) (%d+) ([rw]) (.+)$')
    if deadline and tonumber(deadline) >= s.now then
      local n = nil
      if not (side == 'w' and s.mode) then
        n = rw_token(s, fence, fence_ttl)
      end
      if n and side == 'r' then
        -- The zset first: one of another type refuses before the hash is
        -- written.
        if type(redis.pcall('zadd', readers, s.now + tonumber(lease), owner)) == 'table' then
          n = nil
        end
      end
      if not n then
        -- It cannot enter (yet): back at the head, the queue kept at least
        -- as long as its deadline.
        s.popped = s.popped - 1
        if redis.call('lpush', queue, entry) == 1 then
          redis.call('pexpire', queue, tonumber(deadline) - s.now + 1)
        end
        return mine, true
      end
      local given = string.format('%.0f', n)
      if side == 'w' then
        redis.call('hset', h, '~mode', 'write', 'w:' .. owner, 1, '~t', given)
        s.mode = 'write'
      else
        redis.call('hset', h, '~mode', 'read', 'r:' .. owner, 1, 't:' .. owner, given)
        rw_cover(s, readers, tonumber(lease))
        s.mode = 'read'
      end
      rw_cover(s, h, tonumber(lease))
      if entry == me then
        mine = n
      else
        redis.call(publish, channel, 'g:' .. given .. ':' .. number .. ':' .. side .. '|' .. owner)
      end
    end
  end
  return mine, true
end
