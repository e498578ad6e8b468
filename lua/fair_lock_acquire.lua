-- Acquire, re-enter or queue for a fair (FIFO) lock.
-- KEYS[1]  lock hash: field <owner id> = hold count, '~t' = fencing token,
--          '~w' = the queue may hold waiters (the release looks); the
--          layout of the plain lock, whose release script serves
-- KEYS[2]  fencing counter (string, TTL ARGV[4]; see next_token in lib/tokens.lua)
-- KEYS[3]  wait queue (list of "@<queue deadline> <lease ms> <number> 0
--          <owner id>", oldest first, the deadline in server ms): a release
--          hands the lock to the oldest entry whose deadline has not passed
--          (see hand_to_next in lib/lock.lua)
-- ARGV[1]  owner: owner id "<client uuid>:<task id>"
-- ARGV[2]  lease_ms: lease, milliseconds (> 0)
-- ARGV[3]  keep: token of the acquisition the caller holds and re-enters,
--          or '' for a fresh acquisition: a field of this owner with
--          another token was left by an acquisition the caller no longer
--          holds (lost, its release never arrived, or handed to it while
--          the message was lost) and is replaced with a new token
-- ARGV[4]  fence_ttl_ms: fencing counter TTL, milliseconds
-- ARGV[5]  queue_lease_ms: queue lease, milliseconds (> 0): the entry's
--          deadline is now plus this; a waiter that does not look again by
--          then (crashed) is skipped
-- ARGV[6]  wait: '' = one try that never queues; '1' = join the queue when
--          busy; '2' = queued already by an earlier attempt (refresh the
--          entry's deadline; join again under ARGV[8] only if the entry is
--          gone)
-- ARGV[7]  number: the number of the caller's queue entry (a decimal; with
--          the owner it names the entry, and a hand-off message names it
--          too)
-- ARGV[8]  next_number: the number a new entry takes when the caller's
--          ('2') is gone
-- ARGV[9]  publish: publish command: 'spublish' or 'publish'
-- ARGV[10] channel: channel
-- ARGV[11] expect_busy: '1' = the caller expects the lock held by another
--          owner: read the hash first, and the lock's PTTL only when needed
-- ARGV[12] expire_gt: '1' = the server has PEXPIRE .. GT (Redis >= 7)
-- ARGV[13] restart_guard.marker: with a restart guard, '~restart-guard'
--          (lib/restart_guard.lua)
-- ARGV[14] restart_guard.bound: its bound, seconds
-- ARGV[15] restart_guard.saved: the accepted LASTSAVE
-- Returns {1, token} acquired, {2, token} re-entered (same token), or {0,
-- pttl ms, queued, head ms} busy: queued 0 no, 1 yes, 2 under the new
-- number ARGV[8]; pttl -3 when not read (a waiter behind others needs none:
-- it is handed the lock, or looks again on its own); head ms, when the lock
-- is free, what is left of the queue deadline of the live waiter ahead of
-- the caller (-1 otherwise).
-- Nobody overtakes a live waiter: a free lock is taken only by the caller
-- whose entry is the oldest live one, or by anyone when no entry is live;
-- a release hands it to the oldest live entry.
-- A key of another type is an error naming it, before anything is written.
local lock, fence, queue, owner = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
local lease, qlease, mode = tonumber(ARGV[2]), tonumber(ARGV[5]), ARGV[6]
local err

local held, pttl
held, pttl, err = read_hold(lock, owner, ARGV[11] == '1', 'fair lock')
if err then
  return err
end

if held[1] and held[2] == ARGV[3] then
  redis.call('hincrby', lock, owner, 1)
  -- Re-entry never shortens the lease: PTTL becomes max(PTTL, lease).
  pttl = pttl or redis.call('pttl', lock)
  if pttl < lease then
    redis.call('pexpire', lock, lease)
  end
  return {2, tonumber(held[2])}
end
-- A key without a token was not written by redisync: busy, never queued.
if pttl and pttl ~= -2 and not held[2] then
  return {0, pttl, 0, -1}
end

local now, now_us
local function clock()
  if not now then
    now, now_us = server_time()
  end
  return now
end

-- The deadline and the owner of an entry of ours (nil: not one of ours),
-- and whether it is the caller's.
local function parse(entry)
  local deadline, number, who = string.match(entry, '^@(%d+) %d+ (%d+) %d+ (.+)$')
  return tonumber(deadline), who == owner and number == ARGV[7]
end
local function entry_of(number)
  return '@' .. string.format('%.0f', clock() + qlease) .. ' ' .. ARGV[2] .. ' ' .. number .. ' 0 ' .. owner
end

-- The queue as far as needed, validated before anything is written: all
-- of it when the caller has an entry (its place and what is ahead), the
-- head when the lock is free or ours; nothing when it is busy (the RPUSH
-- validates it then).
local entries = {}
local mine
if mode == '2' or pttl == -2 or held[1] then
  local read
  if mode == '2' then
    read = redis.pcall('lrange', queue, 0, -1)
  else
    read = redis.pcall('lindex', queue, 0)
  end
  err = read_error(read, queue, 'fair lock queue')
  if err then
    return err
  end
  if type(read) == 'table' then
    entries = read
  elseif read then
    entries = {read}
  end
  if mode == '2' then
    for i, entry in ipairs(entries) do
      local _, is_ours = parse(entry)
      if is_ours then
        mine = i
        break
      end
    end
  end
end

local counter
if pttl == -2 or held[1] then
  counter, err = read_fence(fence)
  if err then
    return err
  end
end

-- `others`: waiters may stay queued behind us (our release must look).
local function grant(others)
  if mine then
    redis.call('lrem', queue, 1, entries[mine])
  end
  local token = next_token(fence, ARGV[4], counter, nil, now_us)
  if others then
    redis.call('hset', lock, owner, 1, '~t', string.format('%.0f', token), '~w', 1)
  else
    redis.call('hset', lock, owner, 1, '~t', string.format('%.0f', token))
  end
  redis.call('pexpire', lock, lease)
  return {1, token}
end

-- A stale field of ours: the lock is ours in Redis either way, so a fresh
-- acquisition takes it over with a new token (no queue can be ahead of it).
if held[1] then
  return grant(#entries > (mine and 1 or 0))
end

-- When the lock is free: how long the live waiter ahead of us still holds
-- its place (it takes the lock when it next looks; if it crashed, we look
-- again when its deadline passes).
local head_ms = -1
if pttl == -2 then
  -- Entries ahead of ours (all of them, without one) whose deadline passed
  -- are waiters that stopped refreshing: they do not count.
  for i = 1, (mine or #entries + 1) - 1 do
    local deadline = parse(entries[i])
    if deadline and deadline >= clock() then
      head_ms = deadline - clock()
      break
    end
  end
  if head_ms < 0 then
    if mine then
      -- Ours is the oldest live entry: take the lock, dropping it and what
      -- is ahead in one trim.
      local others = #entries > mine
      redis.call('ltrim', queue, mine, -1)
      mine = nil
      return grant(others)
    end
    if mode == '2' then
      -- Our entry is gone and nobody live waits: take it, and the queue of
      -- dead entries goes.
      if #entries > 0 then
        redis.call('del', queue)
      end
      return grant(false)
    end
    -- Only the head was read, and it is dead (or missing): drop the dead
    -- heads; take the lock if nobody live is left.
    local head = entries[1]
    while head do
      local deadline = parse(head)
      if deadline and deadline >= clock() then
        head_ms = deadline - clock()
        break
      end
      redis.call('lpop', queue)
      head = redis.call('lindex', queue, 0)
    end
    if not head then
      return grant(false)
    end
  end
end
if mode == '' then
  return {0, pttl or -3, 0, head_ms}
end

-- Busy: join the queue, or refresh our place in it.
local queued = 1
local created = false
local first_live = mine == 1
if mine then
  redis.call('lset', queue, mine - 1, entry_of(ARGV[7]))
  if not first_live then
    -- Only dead entries ahead: we are the head in effect.
    first_live = true
    for i = 1, mine - 1 do
      local deadline = parse(entries[i])
      if deadline and deadline >= clock() then
        first_live = false
        break
      end
    end
  end
else
  local number = ARGV[7]
  if mode == '2' then
    -- Gone (handed to us and expired, or skipped after a stall): a new
    -- entry with a new number.
    number = ARGV[8]
    queued = 2
  end
  local length = redis.pcall('rpush', queue, entry_of(number))
  err = read_error(length, queue, 'fair lock queue')
  if err then
    return err
  end
  mine = length
  created = length == 1
  first_live = created
end
-- The queue outlives its live entries: our deadline is now plus our queue
-- lease, and live waiters refresh theirs (and the queue's TTL) well before
-- theirs passes. The TTL only grows (a waiter with a shorter queue lease
-- must not cut the place of one with a longer one): PEXPIRE .. GT from
-- Redis 7, a look at the PTTL before; a queue nobody waits in any more goes.
keep_for(queue, qlease + lease, created, ARGV[12] == '1')
-- Tell the holder that somebody waits: its release then hands it on.
if pttl ~= -2 and not held[3] then
  redis.call('hset', lock, '~w', 1)
end
if first_live and not pttl then
  -- The head watches the holder's lease (a crashed holder hands nothing over).
  pttl = redis.call('pttl', lock)
end
return {0, pttl or -3, queued, head_ms}
