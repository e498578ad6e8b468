-- Take the read or the write side of a read-write lock (re-entrant per
-- owner), or wait for it in the queue.
-- KEYS[1]  hash (see "Read-write locks" in lib/rw_queue.lua for the layout)
-- KEYS[2]  readers zset: <owner> -> end of that reader's lease (server ms)
-- KEYS[3]  fencing counter (TTL ARGV[5]; see next_token in lib/tokens.lua)
-- KEYS[4]  wait queue (list of "@<queue deadline> <lease ms> <number> <r|w>
--          <owner>", oldest first): a release hands the lock to its oldest
--          live entries that can enter (see hand_rw in lib/rw_queue.lua)
-- ARGV[1]  owner: owner id
-- ARGV[2]  lease_ms: lease, milliseconds
-- ARGV[3]  side: 'r' read or 'w' write
-- ARGV[4]  keep: token of the hold the caller re-enters on that side, or ''
--          for a fresh acquisition: a field of this owner with another
--          token was left by an acquisition the caller no longer holds (its
--          release never arrived, or it was handed the lock and the message
--          was lost) and is replaced, with a new token, so nothing carrying
--          the old token matches it any more
-- ARGV[5]  fence_ttl_ms: fencing counter TTL, milliseconds
-- ARGV[6]  wait: '' = one try that never queues; '1' = join the queue when
--          busy; '2' = queued already by an earlier attempt (refresh the
--          entry's deadline; join again under ARGV[9] only if the entry is
--          gone)
-- ARGV[7]  queue_lease_ms: queue lease, milliseconds: an entry's deadline
--          is now plus this
-- ARGV[8]  number: the number of the caller's queue entry (a decimal; with
--          the side and the owner it names the entry, and a hand-off
--          message too)
-- ARGV[9]  next_number: the number a new entry takes when the caller's
--          ('2') is gone
-- ARGV[10] publish: publish command: 'spublish' or 'publish'
-- ARGV[11] channel: channel
-- ARGV[12] expire_gt: '1' = the server has PEXPIRE .. GT (Redis >= 7)
-- ARGV[13] restart_guard.marker: with a restart guard, '~restart-guard'
--          (lib/restart_guard.lua)
-- ARGV[14] restart_guard.bound: its bound, seconds
-- ARGV[15] restart_guard.saved: the accepted LASTSAVE
-- Returns {1, token} acquired, {2, token} re-entered, {0, ms, queued} busy
-- (ms: how long the holders' leases last, for the queue's head; how long
-- the place of the first waiter ahead lasts, for the others; -1 when not
-- read; queued 0 no, 1 yes, 2 under the new number ARGV[9]), {-3, 0}
-- write asked by an owner holding only a read lock (an upgrade would
-- deadlock: refused). Readers whose lease ended (crashed) are dropped
-- first.
-- Nobody passes a live waiter: a free lock, or a read lock for a reader,
-- is taken only when no live entry waits ahead; waiters ahead that can
-- enter are handed it first (a crashed holder's lease ended, nobody told
-- them). So a waiting writer holds new readers back, and a stream of
-- readers cannot starve writers. Exempt, so they never wait for
-- themselves: an owner that reads already re-enters, and a writer takes
-- the read side at once (a downgrade).
-- A key of another type is an error naming it, before anything is written,
-- once the script uses it: while another owner writes, an attempt reads the
-- hash only, and its RPUSH validates the queue (the counter and the readers
-- zset are validated by the first attempt that may grant).
local h, readers, fence, queue = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, lease, side, reentry = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local wait, qlease, fence_ttl = ARGV[6], tonumber(ARGV[7]), ARGV[5]
local held = redis.pcall('hmget', h, '~mode', 'w:' .. owner, '~t', 'r:' .. owner, 't:' .. owner)
local err = read_error(held, h, 'read-write lock')
if err then
  return err
end
local s = {mode = held[1] or nil, popped = 0, fresh = {}}
s.now, s.now_us = server_time()
if not s.mode then
  -- No hold in it: a grant sets the TTLs.
  s.fresh[h], s.fresh[readers] = true, true
end
-- Every read first: the script writes nothing when a key is of another
-- type. A caller that certainly waits (`blocked`: no grant, and no hand-off
-- in this script) needs neither the counter nor, unless it is queued
-- already, the queue: its RPUSH validates the queue.
local first
if s.mode ~= 'write' or held[4] then
  first = redis.pcall('zrange', readers, 0, 0, 'WITHSCORES')
  err = read_error(first, readers, 'read-write lock readers zset')
  if err then
    return err
  end
end
-- Live readers (none of them the caller) keep a writer out.
local reading = s.mode == 'read' and not held[4] and first[2] and tonumber(first[2]) > s.now
-- Write held by another owner, or read by others for a writer.
local blocked = (s.mode == 'write' and not held[2]) or (side == 'w' and reading)
local entries = {}
if not blocked or wait == '2' then
  entries = redis.pcall('lrange', queue, 0, -1)
  err = read_error(entries, queue, 'read-write lock queue')
  if err then
    return err
  end
end
-- Whether a hand-off now would take the head entry: a reader (the lock is
-- not written when this is asked), anything while the lock is free, or a
-- dead entry (dropped).
local function may_enter(entry)
  local deadline, entry_side = string.match(entry, '^@(%d+) %d+ %d+ ([rw]) ')
  return not deadline or tonumber(deadline) < s.now or entry_side == 'r' or not s.mode
end
-- A reader behind a waiting writer, while others read.
if side == 'r' and reading and #entries > 0 and not may_enter(entries[1]) then
  blocked = true
end
if not blocked then
  s.last, err = read_fence(fence)
  if err then
    return err
  end
  s.read = true
end
-- The caller's entry (as read) and its index.
local mine, at
if wait == '2' then
  local suffix = ' ' .. ARGV[8] .. ' ' .. side .. ' ' .. owner
  for i, entry in ipairs(entries) do
    if string.sub(entry, -#suffix) == suffix then
      mine, at = entry, i
      break
    end
  end
end

-- Readers whose lease ended (crashed) go; a read lock left without one is
-- free. (In write mode, the only readers are the writer's own.)
if first then
  if first[2] and tonumber(first[2]) <= s.now then
    for _, gone in ipairs(redis.call('zrangebyscore', readers, '-inf', s.now)) do
      redis.call('hdel', h, 'r:' .. gone, 't:' .. gone)
      if gone == owner then
        held[4], held[5] = false, false
      end
    end
    redis.call('zremrangebyscore', readers, '-inf', s.now)
    first = redis.call('zrange', readers, 0, 0, 'WITHSCORES')
  end
  if s.mode == 'read' and not first[2] then
    redis.call('del', h, readers)
    s.mode = nil
    s.fresh[h], s.fresh[readers] = true, true
    -- reintroduce: rw-read-reentry-after-readers-expired
    -- The caller's own read went with it (the readers key ran out while
    -- the hash lived on): not re-entered, a fresh grant.
    held[4], held[5] = false, false
  end
end

-- A grant to the caller: its own entry goes, the counter follows.
local function granted(n)
  if mine then
    redis.call('lrem', queue, 1, mine)
  end
  rw_save_counter(s, fence, fence_ttl)
  return {1, n}
end
local function grant_write()
  local n = rw_token(s, fence, fence_ttl)
  redis.call('hset', h, '~mode', 'write', 'w:' .. owner, 1, '~t', string.format('%.0f', n))
  rw_cover(s, h, lease)
  return granted(n)
end
local function grant_read()
  local n = rw_token(s, fence, fence_ttl)
  redis.call('zadd', readers, s.now + lease, owner)
  if s.mode then
    redis.call('hset', h, 'r:' .. owner, 1, 't:' .. owner, string.format('%.0f', n))
  else
    redis.call('hset', h, '~mode', 'read', 'r:' .. owner, 1, 't:' .. owner, string.format('%.0f', n))
    s.mode = 'read'
  end
  rw_cover(s, readers, lease)
  rw_cover(s, h, lease)
  return granted(n)
end

-- The caller's own holds: re-entry, a stale field replaced, a downgrade,
-- a refused upgrade. None of these waits.
if side == 'w' then
  if s.mode == 'write' and held[2] then
    if held[3] == reentry then
      redis.call('hincrby', h, 'w:' .. owner, 1)
      rw_cover(s, h, lease)
      return {2, tonumber(held[3])}
    end
    return grant_write()
  end
  if s.mode == 'read' and held[4] then
    return {-3, 0}
  end
else
  if held[4] then
    if held[5] == reentry then
      redis.call('hincrby', h, 'r:' .. owner, 1)
      redis.call('zadd', readers, 'GT', s.now + lease, owner)
      rw_cover(s, readers, lease)
      rw_cover(s, h, lease)
      return {2, tonumber(held[5])}
    end
    return grant_read()
  end
  if s.mode == 'write' and held[2] then
    return grant_read()
  end
end

-- Waiters ahead that can enter are handed the lock first (the caller too,
-- when its entry is among them).
local waits = #entries > 0
if not blocked and s.mode ~= 'write' and waits and may_enter(entries[1]) then
  local n
  n, waits = hand_rw(h, readers, queue, s, fence, fence_ttl, ARGV[10], ARGV[11], mine)
  if n then
    mine = nil
    return granted(n)
  end
  if at and at <= s.popped then
    -- Popped as dead (our deadline passed while we stalled): gone.
    mine, at = nil, nil
  end
end
if not waits and (s.mode == nil or (side == 'r' and s.mode == 'read')) then
  if side == 'w' then
    return grant_write()
  end
  return grant_read()
end
rw_save_counter(s, fence, fence_ttl)

-- Busy. The queue's head learns how long the holders' leases last (a
-- crashed holder hands nothing over); a waiter behind others, when it read
-- the queue, how long the first one's place lasts (it may have crashed).
local function bound(head)
  if not head then
    local ahead = entries[s.popped + 1]
    local deadline = ahead and ahead ~= mine and string.match(ahead, '^@(%d+) ')
    if deadline then
      return math.max(0, tonumber(deadline) - s.now)
    end
    return -1
  end
  if s.mode == 'read' and first and first[2] then
    return math.max(0, tonumber(first[2]) - s.now)
  end
  return redis.call('pttl', h)
end
if wait == '' then
  return {0, bound(true), 0}
end
local queued = 1
local entry_of = function(number)
  return '@' .. string.format('%.0f', s.now + qlease) .. ' ' .. ARGV[2] .. ' ' .. number .. ' ' .. side .. ' ' .. owner
end
local head
if mine then
  head = at - s.popped == 1
  redis.call('lset', queue, at - s.popped - 1, entry_of(ARGV[8]))
else
  local number = ARGV[8]
  if wait == '2' then
    -- Gone (handed to us and expired, or dropped after a stall): a new
    -- entry with a new number.
    number = ARGV[9]
    queued = 2
  end
  local length = redis.pcall('rpush', queue, entry_of(number))
  err = read_error(length, queue, 'read-write lock queue')
  if err then
    return err
  end
  head = length == 1
end
-- The queue outlives its live entries (each refreshes its deadline, and
-- the queue's TTL, well before it passes); the TTL only grows.
keep_for(queue, qlease, head and not mine, ARGV[12] == '1')
return {0, bound(head), queued}
