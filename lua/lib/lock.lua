-- Locks (reentrant and fair): the hash's view for an acquisition, the
-- hand-off to the oldest waiter and the release. Uses common.lua and
-- tokens.lua.

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
