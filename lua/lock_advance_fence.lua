-- Raise a lock's fencing counter to at least a value (Redlock writes the
-- highest token of its majority back, so any later majority sees it).
-- KEYS[1]  fencing counter
-- ARGV[1]  minimum value (a decimal integer)
-- ARGV[2]  counter TTL, milliseconds (refreshed)
-- Returns the counter after the call. A key that is not a counter is an
-- error naming it (nothing written).
local current, err = read_fence(KEYS[1])
if err then
  return err
end
local wanted = tonumber(ARGV[1])
if wanted > current then
  redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return wanted
end
redis.call('pexpire', KEYS[1], ARGV[2])
return current
