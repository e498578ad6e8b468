-- Give back the permits of one acquisition, or (undo) also take its wait
-- queue entry out: an acquisition whose waiter gave up, was cancelled, or
-- whose reply never arrived.
-- KEYS[1]  semaphore hash (see semaphore_acquire.lua)
-- KEYS[2]  lease zset
-- KEYS[3]  wait queue (optional: without it, queued waiters are woken, not
--          handed permits, as while the slot migrates)
-- ARGV[1]  permit_id: permit id
-- ARGV[2]  publish: publish command
-- ARGV[3]  channel: release channel
-- ARGV[4]  leave: '1' = also remove the id's queue entry (whatever its
--          number)
-- ARGV[5]  releaser: the releasing client's uuid (optional, '' or missing:
--          the id's own client): a release by permit id may come from
--          another client
-- Returns {permits given back (0 when it held none), permits free after, 1 if some went to a
-- waiter of another client (the releasing client's own waiters then join
-- the queue: they may wait without an entry) else 0}; {0, 0, 0} if the
-- acquisition is not held (expired and reclaimed, released already, or
-- never granted) and left no queue entry. Freed permits (and free permits
-- a leaving head's ask did not fit) go to
-- the queue's oldest waiters first (see hand_permits in lib/semaphore_queue.lua).
-- Publishes a wake-up for everybody when a client other than the releasing
-- one marked '~w' (its waiters wait without a queue entry) and permits stay
-- free. The reads validate the hash and the zset before anything is
-- written; a queue that is not a list hands nothing.
local sem, leases, queue, id = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
local releaser = (ARGV[5] and ARGV[5] ~= '') and ARGV[5] or client_of(id)
local h = redis.pcall('hmget', sem, '~used', '~w', '~q', '~permits', '~t')
local err = read_error(h, sem, 'semaphore')
if err then
  return err
end
local gone = redis.pcall('zrem', leases, id)
err = read_error(gone, leases, 'semaphore lease zset')
if err then
  return err
end
local left = false
if ARGV[4] == '1' and queue then
  local entries = redis.pcall('lrange', queue, 0, -1)
  if type(entries) == 'table' and not entries.err then
    left = leave_queue(queue, entries, ' ' .. id)
  end
end
if gone == 0 and not left then
  return {0, 0, 0}
end
-- A waiter that left may have been the head whose ask did not fit: the
-- permits free now go on to the entries behind it (they wait for nothing
-- else).
local n = gone == 0 and 0 or permits_of(id)
local state = {total = tonumber(h[4] or '0'), used = math.max(0, tonumber(h[1] or '0') - n), last = tonumber(h[5] or '0'), mark = h[2], client = releaser}
local changes = {}
local wake = false
if h[3] and not queue then
  wake = true
elseif h[3] then
  state.now, state.now_us = server_time()
  local empty = hand_permits(state, leases, queue, ARGV[2], ARGV[3], nil)
  if empty then
    redis.call('hdel', sem, '~q')
  end
  if state.last ~= tonumber(h[5] or '0') then
    changes = {'~t', string.format('%.0f', state.last)}
  end
end
local free = math.max(0, state.total - state.used)
if state.mark and state.mark ~= releaser and free > 0 then
  -- Its waiters wait for a message (they have no queue entry).
  redis.call('hdel', sem, '~w')
  wake = true
elseif state.mark ~= h[2] then
  table.insert(changes, '~w')
  table.insert(changes, state.mark)
end
if wake then
  redis.call(ARGV[2], ARGV[3], 'unlock')
end
if gone > 0 or #changes > 0 then
  redis.call('hset', sem, '~used', state.used, unpack(changes))
end
return {n, free, state.to_others and 1 or 0}
