-- Delete a read-write lock whoever holds it (all readers and the writer).
-- KEYS[1]  hash;  KEYS[2]  readers zset;  KEYS[3]  fencing counter
-- ARGV[1]  publish command;  ARGV[2]  channel
-- Returns {1, last} if it was locked, {0, last} if not, `last` at least the
-- last fencing token issued (see last_issued in prelude.lua). A key of
-- another type is an error.
local err = wrong_type({KEYS[1], 'hash', KEYS[2], 'zset'})
if err then
  return err
end
local last
last, err = last_issued(KEYS[3])
if err then
  return err
end
if redis.call('exists', KEYS[1]) == 0 then
  redis.call('del', KEYS[2])
  return {0, last}
end
redis.call('del', KEYS[1], KEYS[2])
redis.call(ARGV[1], ARGV[2], 'released')
return {1, last}
