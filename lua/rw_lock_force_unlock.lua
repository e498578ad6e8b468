-- Delete a read-write lock whoever holds it (all readers and the writer).
-- KEYS[1]  hash;  KEYS[2]  readers zset;  KEYS[3]  fencing counter
-- ARGV[1]  publish command;  ARGV[2]  channel
-- Returns {1, last} if it was locked, {0, last} if not, `last` at least the
-- last fencing token issued (the counter, or the server time in us when the
-- counter expired: tokens are never below the time of their grant): every
-- acquisition with a token up to it ran before this script and is gone. A
-- key of another type is an error.
local err = wrong_type({KEYS[1], 'hash', KEYS[2], 'zset'})
if err then
  return err
end
local last
last, err = read_fence(KEYS[3])
if err then
  return err
end
local _, now_us = server_time()
last = math.max(last, now_us)
if redis.call('exists', KEYS[1]) == 0 then
  redis.call('del', KEYS[2])
  return {0, last}
end
redis.call('del', KEYS[1], KEYS[2])
redis.call(ARGV[1], ARGV[2], 'released')
return {1, last}
