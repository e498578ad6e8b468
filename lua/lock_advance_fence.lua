-- Raise a lock's fencing counter to at least a value (Redlock writes the
-- highest token of its majority back, so any later majority sees it).
-- KEYS[1]  fencing counter
-- KEYS[2]  lock hash: while it is held, a hand-off to a queued waiter
--          issues the next token from the hash, so the floor goes there too
-- ARGV[1]  minimum: minimum value (a decimal integer)
-- ARGV[2]  fence_ttl_ms: counter TTL, milliseconds (refreshed)
-- Returns the counter after the call. A key that is not a counter is an
-- error naming it (nothing written).
local current, err = read_fence(KEYS[1])
if err then
  return err
end
local floor = redis.pcall('hget', KEYS[2], '~f')
err = read_error(floor, KEYS[2], 'lock')
if err then
  return err
end
local wanted = tonumber(ARGV[1])
if redis.call('exists', KEYS[2]) == 1 and wanted > (tonumber(floor) or 0) then
  redis.call('hset', KEYS[2], '~f', ARGV[1])
end
if wanted > current then
  redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return wanted
end
redis.call('pexpire', KEYS[1], ARGV[2])
return current
