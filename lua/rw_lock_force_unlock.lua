-- Delete a read-write lock whoever holds it (all readers and the writer),
-- and hand it to the queue's oldest live entries that can enter.
-- KEYS[1]  hash;  KEYS[2]  readers zset;  KEYS[3]  fencing counter;
-- KEYS[4]  wait queue (see rw_lock_acquire.lua)
-- ARGV[1]  publish: publish command
-- ARGV[2]  channel: channel
-- ARGV[3]  fence_ttl_ms: fencing counter TTL, milliseconds
-- Returns {1, last} if it was locked, {0, last} if not, `last` at least the
-- last fencing token issued before the script (see last_issued in
-- lib/tokens.lua): a hold handed on here has a higher one. A key of another
-- type is an error, before anything is written.
local h, readers, fence, queue = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local err = wrong_type({h, 'hash', readers, 'zset', queue, 'list'})
if err then
  return err
end
local last
last, err = last_issued(fence)
if err then
  return err
end
local locked = redis.call('exists', h) == 1
redis.call('del', h, readers)
-- Handed tokens follow `last`: above every hold the script ended.
local s = {popped = 0, fresh = {[h] = true, [readers] = true}, last = last, read = true}
s.now, s.now_us = server_time()
hand_rw(h, readers, queue, s, fence, ARGV[3], ARGV[1], ARGV[2], nil)
rw_save_counter(s, fence, ARGV[3])
if locked and s.last == last then
  -- Nobody was handed it: waiters whose entry lapsed look again now.
  redis.call(ARGV[1], ARGV[2], 'unlock')
end
if locked then
  return {1, last}
end
return {0, last}
