-- Release one hold of a read-write lock, or undo an acquisition (a lost
-- reply, a waiter that leaves the queue).
-- KEYS[1]  hash (see "Read-write locks" in lib/rw_queue.lua)
-- KEYS[2]  readers zset
-- KEYS[3]  wait queue
-- KEYS[4]  fencing counter
-- ARGV[1]  owner: owner id
-- ARGV[2]  token: fencing token
-- ARGV[3]  last: '1' = last local hold: drop the owner's side whatever its
--          count ('0' = one hold)
-- ARGV[4]  side: 'r' or 'w'
-- ARGV[5]  publish: publish command
-- ARGV[6]  channel: channel
-- ARGV[7]  mode: '=' release the acquisition with this token; '!' undo:
--          leave the queue (every entry of this owner and side) and delete
--          any acquisition of this owner and side except this token ('' =
--          none)
-- ARGV[8]  fence_ttl_ms: fencing counter TTL, milliseconds
-- Returns 0 not held (nothing written but an undo's queue entries), 1
-- still held, 2 released, 4 released and handed to waiters of the queue.
-- A release that frees the lock, or turns it to read mode, hands it to the
-- queue's oldest live entries that can enter (see hand_rw in lib/rw_queue.lua):
-- one writer, or the readers ahead of the first writer. So does an undo
-- whose entry held others back. The hash (and, for an undo, the queue and a
-- reader's zset) is validated before anything is written; a queue, a
-- readers zset or a counter of another type stops the hand-off only (the
-- next acquisition reports it).
local h, readers, queue, fence = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, token, last, side, match = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[7]
local count_field, token_field = 'w:' .. owner, '~t'
if side == 'r' then
  count_field, token_field = 'r:' .. owner, 't:' .. owner
end
local held = redis.pcall('hmget', h, count_field, token_field, '~mode', 'r:' .. owner)
local err = read_error(held, h, 'read-write lock')
if err then
  return err
end
local s = {mode = held[3] or nil, popped = 0, fresh = {}, last = tonumber(token) or 0}

-- A writer that also reads (a downgrade) reads on after its write release
-- while its read's lease lasts (the zset is validated here, before any write).
local own_read = false
if side == 'w' and held[4] then
  s.now, s.now_us = server_time()
  local ends = redis.pcall('zscore', readers, owner)
  err = read_error(ends, readers, 'read-write lock readers zset')
  if err then
    return err
  end
  own_read = ends and tonumber(ends) > s.now
end

-- An undo leaves the queue first: a reader's zset, written after it, is
-- validated before.
local left = false
if match == '!' then
  if side == 'r' then
    err = read_error(redis.pcall('zscore', readers, owner), readers, 'read-write lock readers zset')
    if err then
      return err
    end
  end
  local entries = redis.pcall('lrange', queue, 0, -1)
  err = read_error(entries, queue, 'read-write lock queue')
  if err then
    return err
  end
  left = leave_queue(queue, entries, ' ' .. side .. ' ' .. owner)
end

-- Hands the lock on from mode s.mode; 4 when something was handed, else
-- `code`.
local function hand_on(code)
  if s.mode == 'write' then
    return code
  end
  if not s.now then
    s.now, s.now_us = server_time()
  end
  local before = s.last
  hand_rw(h, readers, queue, s, fence, ARGV[8], ARGV[5], ARGV[6], nil)
  rw_save_counter(s, fence, ARGV[8])
  if s.last ~= before then
    return 4
  end
  return code
end

local ours = held[1] and ((match == '=' and held[2] == token) or (match == '!' and held[2] ~= token))
if not ours then
  if left and s.mode ~= 'write' then
    -- Our entry may have held others back (a writer ahead of readers), or
    -- the lock is free and nobody told them.
    hand_on(0)
  end
  return 0
end
if last ~= '1' and tonumber(held[1]) > 1 then
  redis.call('hincrby', h, count_field, -1)
  return 1
end

if side == 'w' then
  if own_read then
    -- A downgrade: the writer keeps reading, and readers may join.
    redis.call('hdel', h, count_field, token_field)
    redis.call('hset', h, '~mode', 'read')
    s.mode = 'read'
  elseif held[4] then
    -- Free: the writer's own read, whose lease ended, goes with it.
    redis.call('del', h, readers)
    s.mode = nil
    s.fresh[h], s.fresh[readers] = true, true
  else
    redis.call('del', h)
    s.mode = nil
    s.fresh[h] = true
  end
  return hand_on(2)
end

-- A reader: the read lock is free once no live reader is left.
local gone = redis.pcall('zrem', readers, owner)
if type(gone) == 'table' then
  return read_error(gone, readers, 'read-write lock readers zset')
end
redis.call('hdel', h, count_field, token_field)
if s.mode ~= 'read' then
  -- The read of a writer (a downgrade): the writer still holds.
  return 2
end
local first = redis.call('zrange', readers, 0, 0, 'WITHSCORES')
if first[2] then
  s.now, s.now_us = server_time()
  if tonumber(first[2]) > s.now then
    -- Other readers read on: a writer waiting at the head waits for them.
    return 2
  end
  for _, crashed in ipairs(redis.call('zrangebyscore', readers, '-inf', s.now)) do
    redis.call('hdel', h, 'r:' .. crashed, 't:' .. crashed)
  end
  redis.call('zremrangebyscore', readers, '-inf', s.now)
  if redis.call('zcard', readers) > 0 then
    return 2
  end
end
redis.call('del', h, readers)
s.mode = nil
s.fresh[h], s.fresh[readers] = true, true
return hand_on(2)
