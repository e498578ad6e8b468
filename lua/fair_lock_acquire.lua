-- Acquire, re-enter or queue for a fair (FIFO) lock.
-- KEYS[1]  lock hash: field <owner id> = hold count, '~t' = fencing token,
--          '~w' = somebody queued while it was held (same layout as the plain lock)
-- KEYS[2]  queue (list of owner ids, head first)
-- KEYS[3]  queue deadlines (zset: owner id -> deadline, server time in ms)
-- KEYS[4]  fencing counter (string, TTL ARGV[7]; see next_token in prelude.lua)
-- ARGV[1]  owner id "<client uuid>:<task id>"
-- ARGV[2]  lease, milliseconds (> 0)
-- ARGV[3]  queue lease, milliseconds (> 0): a queued owner that does not call
--          again within it is evicted (crashed waiter)
-- ARGV[4]  '1' = queue up (or refresh the queue deadline) when busy; '0' = one
--          try that never queues
-- ARGV[5]  publish command: 'spublish' or 'publish'
-- ARGV[6]  channel: the next owner's id is published on it
-- ARGV[7]  fencing counter TTL, milliseconds
-- ARGV[8]  token of the acquisition the caller holds and re-enters, or ''
--          for a fresh acquisition: a field of this owner with another token
--          was left by an acquisition the caller no longer holds (lost, or
--          its release never arrived) and is replaced with a new token, so
--          nothing carrying the old token matches it any more
-- Returns {1, token} acquired, {2, token} re-entered (same token), or
-- {0, pttl ms of the lock (-2 free), ms until the head's queue deadline when
-- the head is another owner (-1 otherwise)} busy.
-- Only the queue head (or anybody when the queue is empty) may take a free
-- lock. Expired queue entries are purged first: O(expired x queue length).
-- A key of another type is an error naming it, before anything is written.
local lock, queue, deadlines, fence, channel = KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[6]
local owner, lease, qlease = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
-- Each read validates its key's type (an error reply names it) before
-- anything is written.
local held = redis.pcall('hmget', lock, owner, '~t', '~w')
local err = read_error(held, lock, 'fair lock')
if err then
  return err
end
local mine = redis.pcall('zscore', deadlines, owner)
err = read_error(mine, deadlines, 'fair lock queue deadline zset')
if err then
  return err
end
local old_head = redis.pcall('lindex', queue, 0)
err = read_error(old_head, queue, 'fair lock queue')
if err then
  return err
end
local counter
counter, err = read_fence(fence)
if err then
  return err
end

local now, now_us = server_time()

-- Evict waiters whose queue deadline passed (crashed or gone); the
-- deadlines follow the queue, so an empty queue has none.
local expired = {}
if old_head then
  expired = redis.call('zrangebyscore', deadlines, '-inf', now)
end
for _, gone in ipairs(expired) do
  redis.call('lrem', queue, 0, gone)
  if gone == owner then
    mine = false
  end
end
local head = old_head
if #expired > 0 then
  redis.call('zremrangebyscore', deadlines, '-inf', now)
  head = redis.call('lindex', queue, 0)
end
-- A head without a deadline (keys edited by hand) would block everyone.
local head_deadline = false
while head and head ~= owner do
  head_deadline = redis.call('zscore', deadlines, head)
  if head_deadline then
    break
  end
  redis.call('lpop', queue)
  head = redis.call('lindex', queue, 0)
end

if held[1] and held[2] == ARGV[8] then
  redis.call('hincrby', lock, owner, 1)
  -- Re-entry never shortens the lease: PTTL becomes max(PTTL, lease).
  if redis.call('pttl', lock) < lease then
    redis.call('pexpire', lock, lease)
  end
  return {2, tonumber(held[2])}
end

local function grant()
  local token = next_token(fence, ARGV[7], counter, nil, now_us)
  if head == owner then
    redis.call('lpop', queue)
  end
  if mine then
    redis.call('zrem', deadlines, owner)
  end
  redis.call('hset', lock, owner, 1, '~t', string.format('%.0f', token))
  redis.call('pexpire', lock, lease)
  return {1, token}
end

-- A stale field of ours: the lock is ours in Redis either way, so a fresh
-- acquisition takes it over with a new token (no queue can be ahead of it).
if held[1] then
  return grant()
end

local pttl = redis.call('pttl', lock)
if pttl == -2 and (not head or head == owner) then
  return grant()
end

if ARGV[4] == '1' then
  if not mine then
    redis.call('rpush', queue, owner)
    if not head then
      head = owner
    end
  end
  redis.call('zadd', deadlines, now + qlease, owner)
  -- Tells a plain-lock release (client shutdown) to publish.
  if held[2] and not held[3] then
    redis.call('hset', lock, '~w', 1)
  end
end

-- The purge made another owner head of a free lock: tell it.
if pttl == -2 and head and head ~= old_head then
  redis.call(ARGV[5], channel, head)
end
local head_ms = -1
if head and head ~= owner then
  head_ms = math.max(0, tonumber(head_deadline) - now)
end
return {0, pttl, head_ms}
