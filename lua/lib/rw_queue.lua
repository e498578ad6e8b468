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
-- Uses common.lua and tokens.lua.

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
