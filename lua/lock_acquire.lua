-- Acquire or re-enter a reentrant lock.
-- KEYS[1]  lock hash: field <owner id> = hold count, field '~t' = fencing
--          token, '~w' = a waiter may be queued, '~f' = token floor set by
--          an advance while held
-- KEYS[2]  fencing counter (string, TTL ARGV[4]; see next_token in lib/tokens.lua)
-- KEYS[3]  wait queue (list of "<lease ms> <number> <token floor> <owner id>",
--          oldest first, floor 0 for none; a
--          release hands the lock to its head, see hand_to_next in lib/lock.lua)
-- ARGV[1]  owner: owner id "<client uuid>:<task id>"
-- ARGV[2]  lease_ms: lease, milliseconds (> 0)
-- ARGV[3]  keep: token of the acquisition the caller holds and re-enters,
--          or '' for a fresh acquisition
-- ARGV[4]  fence_ttl_ms: fencing counter TTL, milliseconds
-- ARGV[5]  floor: token floor (see next_token in lib/tokens.lua), or ''
--          for none
-- ARGV[6]  wait: '' = do not wait; '1' = wait: join the queue when busy;
--          '2' = wait, queued already by an earlier attempt (joins again
--          only if the entry is gone)
-- ARGV[7]  expect_busy: '1' = the caller expects the lock held by another
--          client (its last look found it so, or its release handed it
--          over): read the hash first, and the lock's PTTL only when needed
-- ARGV[8]  number: the number of the caller's queue entry (a decimal): with
--          the owner it names the entry, and the hand-off message names it
--          too, so a late message never hands a lock to an entry it was not
--          given to
-- ARGV[9]  next_number: the number a new entry takes when the caller's
--          ('2') is gone
-- Returns {1, token} acquired, {2, token} re-entered (same token), {0, pttl
-- ms, queued: 0 no, 1 yes, 2 under the new number ARGV[9]} busy, pttl -3
-- when not read (a waiter behind others in
-- the queue needs none: it is handed the lock, or looks again on its own).
-- ARGV[10] release.owner: the owner id of a hold to release first ('' or
--          missing: none): a guard of this client dropped just before, its
--          release carried by this attempt (one script per cycle). The
--          reply then ends with the release's code (see release_lock in
--          lib/lock.lua).
-- ARGV[11] release.token: its token
-- ARGV[12] release.publish: the publish command
-- ARGV[13] release.channel: the unlock channel
-- ARGV[14] restart_guard.marker: with a restart guard, '~restart-guard'
--          (lib/restart_guard.lua; ARGV[10] to ARGV[13] are '' without a
--          carried release)
-- ARGV[15] restart_guard.bound: its bound, seconds
-- ARGV[16] restart_guard.saved: the accepted LASTSAVE
-- A key of another type is an error naming it, before anything is written.
local lock, fence, queue, owner, lease = KEYS[1], KEYS[2], KEYS[3], ARGV[1], tonumber(ARGV[2])

-- The fencing counter as read before a carried release that did not
-- change it (nil: read it when granting).
local carried_counter

local function attempt()
  -- The caller's queue entry under number n (the floor travels with it: a
  -- hand-off honours it as a grant does).
  local function entry_of(n)
    return ARGV[2] .. ' ' .. n .. ' ' .. (ARGV[5] ~= '' and ARGV[5] or '0') .. ' ' .. owner
  end
  local entry = entry_of(ARGV[8])
  local held, pttl, err = read_hold(lock, owner, ARGV[7] == '1', 'lock')
  if err then
    return err
  end

  local function grant()
    local counter = carried_counter
    if not counter then
      counter, err = read_fence(fence)
      if err then
        return err
      end
    end
    if ARGV[6] == '2' then
      -- Our own entry from an earlier busy attempt goes with the grant.
      local gone = redis.pcall('lrem', queue, 1, entry)
      err = read_error(gone, queue, 'lock queue')
      if err then
        return err
      end
    end
    local token = next_token(fence, ARGV[4], counter, ARGV[5])
    redis.call('hset', lock, owner, 1, '~t', string.format('%.0f', token))
    if ARGV[6] == '2' then
      -- Others may be queued behind us (we got a free lock, e.g. after a
      -- crashed holder): our release must look.
      redis.call('hset', lock, '~w', 1)
    end
    redis.call('pexpire', lock, lease)
    return {1, token}
  end

  if pttl == -2 then
    return grant()
  end

  if held[1] then
    -- reintroduce: reentry-on-any-token
    if held[2] ~= ARGV[3] then
      -- Left by an acquisition of this owner that the caller no longer holds
      -- (its release never arrived, or the lock was handed to it while it
      -- waited and the message was lost): a fresh acquisition replaces it,
      -- with a new token, so nothing carrying the old token matches it any
      -- more.
      return grant()
    end
    redis.call('hincrby', lock, owner, 1)
    -- Re-entry never shortens the lease: PTTL becomes max(PTTL, lease).
    if pttl < lease then
      redis.call('pexpire', lock, lease)
    end
    return {2, tonumber(held[2])}
  end

  -- Busy. Only our own locks (with a token) queue waiters.
  if not held[2] then
    return {0, pttl or redis.call('pttl', lock), 0}
  end
  local queued = 0
  if ARGV[6] ~= '' then
    local at = false
    if ARGV[6] == '2' then
      at = redis.pcall('lpos', queue, entry)
      err = read_error(at, queue, 'lock queue')
      if err then
        return err
      end
      if at == 0 then
        pttl = pttl or redis.call('pttl', lock)
      end
    end
    if not at then
      if ARGV[6] == '2' then
        -- Gone (handed to us and expired, or the queue expired): a new entry
        -- with a new number.
        entry = entry_of(ARGV[9])
        queued = 2
      end
      local length = redis.pcall('rpush', queue, entry)
      err = read_error(length, queue, 'lock queue')
      if err then
        return err
      end
      if length == 1 then
        -- The head watches the holder's lease (a crashed holder hands
        -- nothing over). A new queue lives about as long as its first waiter
        -- could wait for this holder; entries of crashed waiters go with it.
        -- A queue that expires under live waiters only costs them a wake-all.
        pttl = pttl or redis.call('pttl', lock)
        redis.call('pexpire', queue, math.max(pttl, 0) + lease)
      end
    end
    queued = math.max(queued, 1)
  end
  if not pttl and queued == 0 then
    pttl = redis.call('pttl', lock)
  end
  -- Tell the holder that somebody waits (its release then looks at the
  -- queue, or wakes every waiter of other clients).
  if not held[3] then
    redis.call('hset', lock, '~w', 1)
  end
  return {0, pttl or -3, queued}
end

local released
if ARGV[10] and ARGV[10] ~= '' then
  -- What the attempt reads after the release is validated first: it must
  -- not fail once the release wrote (a script that fails writes nothing).
  -- The lock hash is the release's first read; the queue is touched after
  -- a write only to remove our own entry (a hand-off read it as a list).
  local counter, err = read_fence(fence)
  if not err and ARGV[6] == '2' then
    err = wrong_type({queue, 'list'})
  end
  if err then
    return err
  end
  released = release_lock(lock, fence, queue, ARGV[10], ARGV[11], '1', ARGV[12], ARGV[13], ARGV[4])
  if type(released) == 'table' then
    return released
  end
  if released ~= 4 then
    -- Only a hand-off writes the counter.
    carried_counter = counter
  end
end
local reply = attempt()
if released and not reply.err then
  reply[#reply + 1] = released
end
return reply
