-- Take permits of a lease-bound semaphore.
-- KEYS[1]  semaphore hash: '~permits' the total, '~used' permits held, '~t'
--          the last fencing token, '~w' clients whose waiters need a release
--          message (see below), '~q' the wait queue may hold entries
-- KEYS[2]  lease zset: <permit id> -> lease end, server time in ms (the id
--          says how many permits it holds, see permits_of in lib/semaphore.lua)
-- KEYS[3]  wait queue (list of "<lease ms> <number> <permit id>", oldest
--          first: releases hand freed permits to its heads, see
--          hand_permits in lib/semaphore_queue.lua)
-- ARGV[1]  permit_id: permit id (unique per acquisition)
-- ARGV[2]  lease_ms: lease, milliseconds
-- ARGV[3]  declared: the permit total the handle declares ('' for none):
--          set when the semaphore is not set up
-- ARGV[4]  wait: '' = do not wait; '1' = wait: join the queue when busy;
--          '2' = wait, queued already by an earlier attempt (joins again
--          only if the entry is gone)
-- ARGV[5]  number: the number of the caller's queue entry (a decimal; the
--          hand-off message names it, so a late one never counts for
--          another entry)
-- ARGV[6]  next_number: the number a new entry takes when the caller's
--          ('2') is gone
-- ARGV[7]  publish: publish command: 'spublish' (Redis >= 7) or 'publish'
-- ARGV[8]  channel: release channel (hand-off messages)
-- ARGV[9]  queue_keep_ms: how long the queue is kept after a waiter queued
--          or looked, milliseconds (2 x max(lease, watchdog period) + 1 s;
--          missing: 2 x lease + 1 s)
-- ARGV[10] restart_guard.marker: with a restart guard, '~restart-guard'
--          (lib/restart_guard.lua)
-- ARGV[11] restart_guard.bound: its bound, seconds
-- ARGV[12] restart_guard.saved: the accepted LASTSAVE
-- Returns {1, token, free, ms} acquired, `free` permits left after it, `ms`
-- until the earliest lease ends; {0, ms, queued} busy (ms: -1 when no lease
-- ends; queued: 0 no, 1 yes, 2 under the new number ARGV[6]); {-1, 0} not
-- initialised; {-2, total} more permits than the semaphore has. Expired
-- acquisitions (crashed holders) are reclaimed first, and free permits go
-- to queued waiters first (FIFO among waiting clients). A key of another
-- type is an error naming it, before anything is written.
--
-- '~w' is the uuid of the one client whose waiters wait without a queue
-- entry, or '*' for several: a grant that takes the last permit marks its
-- client (its next waiter then waits for a release without asking). A
-- release by another client publishes and clears the mark; a client's own
-- waiters are woken by the client itself.
local sem, leases, queue = KEYS[1], KEYS[2], KEYS[3]
local id, lease, mode = ARGV[1], tonumber(ARGV[2]), ARGV[4]
-- (Without ARGV[9], as a caller of an older layout sends it: two leases.)
local queue_keep = tonumber(ARGV[9]) or 2 * lease + 1000
local wanted = permits_of(id)
local h = redis.pcall('hmget', sem, '~permits', '~used', '~t', '~w', '~q')
local err = read_error(h, sem, 'semaphore')
if err then
  return err
end
local total = tonumber(h[1])
local set_up = false
if not total then
  -- Not set up (never, or lost in a restart): a handle that declares its
  -- total sets it up now, in this script.
  total = tonumber(ARGV[3])
  if not total then
    return {-1, 0}
  end
  set_up = true
end
if wanted > total then
  return {-2, total}
end
local now, now_us = server_time()
-- The queue is validated before the first write when one comes before the
-- queue's own first command (a set-up, a reclaim).
local first = redis.pcall('zrange', leases, 0, 0, 'WITHSCORES')
err = read_error(first, leases, 'semaphore lease zset')
if err then
  return err
end
if (set_up or (first[2] and tonumber(first[2]) <= now)) and (h[5] or mode ~= '') then
  err = read_error(redis.pcall('llen', queue), queue, 'semaphore queue')
  if err then
    return err
  end
end
if set_up then
  redis.call('hset', sem, '~permits', total)
end
-- (What it reclaimed is written with the rest, by save below.)
local used, _
used, first, _, err = reclaim_expired(leases, tonumber(h[2] or '0'), now, first)
if err then
  return err
end
-- What the script may change of the hash: written once, at the end.
local state = {total = total, used = used, last = tonumber(h[3] or '0'), mark = h[4], now = now, now_us = now_us}
local queued, mine = h[5], nil
if queued and total - used > 0 then
  local empty
  empty, mine, err = hand_permits(state, leases, queue, ARGV[7], ARGV[8], id)
  if err then
    -- The queue's first command, before any write but a set-up or a
    -- reclaim (which validated it).
    return err
  end
  if empty then
    queued = nil
  end
  if state.last ~= tonumber(h[3] or '0') then
    -- Handed some: the earliest lease end may be one of theirs now.
    local earliest = redis.call('zrange', leases, 0, 0, 'WITHSCORES')
    first = tonumber(earliest[2])
  end
end

-- Writes what changed of the hash ('~q' cleared when the queue was found
-- empty).
local function save()
  local changes = {}
  if state.used ~= tonumber(h[2] or '0') then
    table.insert(changes, '~used')
    table.insert(changes, state.used)
  end
  if state.last ~= tonumber(h[3] or '0') then
    table.insert(changes, '~t')
    table.insert(changes, string.format('%.0f', state.last))
  end
  if state.mark ~= h[4] then
    table.insert(changes, '~w')
    table.insert(changes, state.mark)
  end
  if queued and not h[5] then
    table.insert(changes, '~q')
    table.insert(changes, 1)
  end
  if #changes > 0 then
    redis.call('hset', sem, unpack(changes))
  end
  if h[5] and not queued then
    redis.call('hdel', sem, '~q')
  end
end

-- The ms until the earliest lease ends, at most `lease`.
local function lease_left()
  first = redis.call('zrange', leases, 0, 0, 'WITHSCORES')
  local ends = now + lease
  if first[2] and tonumber(first[2]) < ends then
    ends = tonumber(first[2])
  end
  return ends - now
end

if mine then
  save()
  return {1, mine, total - state.used, lease_left()}
end

-- Handed to us already (the message still on its way, or lost): a fresh
-- grant of the same permits replaces that one, with a new token (the late
-- message names the old entry, and is ignored). Never counted twice.
local function handed_before()
  if not redis.call('zscore', leases, id) then
    return nil
  end
  state.last = token_after(state.last, now_us)
  if state.used >= total then
    state.mark = mark_with(state.mark, client_of(id))
  end
  save()
  redis.call('zadd', leases, now + lease, id)
  keep_at_least(leases, lease, ARGV[7] == 'spublish', false)
  return {1, state.last, total - state.used, lease_left()}
end

-- reintroduce: semaphore-one-permit-too-many
if not queued and total - state.used >= wanted then
  local again = mode == '2' and handed_before()
  if again then
    return again
  end
  state.last = token_after(state.last, now_us)
  state.used = state.used + wanted
  if state.used >= total then
    state.mark = mark_with(state.mark, client_of(id))
  end
  save()
  redis.call('zadd', leases, now + lease, id)
  keep_at_least(leases, lease, ARGV[7] == 'spublish', not first)
  local ends = now + lease
  if first and first < ends then
    ends = first
  end
  return {1, state.last, total - state.used, ends - now}
end

local wait_ms = -1
if first then
  wait_ms = math.max(0, first - now)
end
if mode == '' then
  save()
  return {0, wait_ms, 0}
end
local entry = ARGV[2] .. ' ' .. ARGV[5] .. ' ' .. id
local answer = 1
if mode == '2' then
  local at = redis.pcall('lpos', queue, entry)
  err = read_error(at, queue, 'semaphore queue')
  if err then
    return err
  end
  if at then
    save()
    keep_at_least(queue, queue_keep, ARGV[7] == 'spublish', false)
    return {0, wait_ms, 1}
  end
  local again = handed_before()
  if again then
    return again
  end
  -- Gone (handed to us and expired, or the queue deleted): a new entry
  -- with a new number.
  entry = ARGV[2] .. ' ' .. ARGV[6] .. ' ' .. id
  answer = 2
end
-- An entry of a crashed waiter is handed permits in its turn, which come
-- back when its lease ends; the queue expires ARGV[9] after its last
-- waiter queued or looked (a live waiter looks again within a watchdog
-- period): a crashed waiter's entry does not keep it for ever.
local length = redis.pcall('rpush', queue, entry)
err = read_error(length, queue, 'semaphore queue')
if err then
  return err
end
keep_at_least(queue, queue_keep, ARGV[7] == 'spublish', length == 1)
queued = true
save()
return {0, wait_ms, answer}
