-- Raise the remaining lease of a lock this acquisition still holds to at
-- least a value (never lowers it: another guard of the same hold, or a
-- watchdog renewal in flight, may count on the longer lease).
-- KEYS[1]  lock hash
-- ARGV[1]  owner id
-- ARGV[2]  fencing token of the acquisition
-- ARGV[3]  lease, milliseconds
-- Returns 1 extended (or already long enough), 0 not held (nothing written).
local err = wrong_type({KEYS[1], 'hash'})
if err then
  return err
end
local held = redis.call('hmget', KEYS[1], ARGV[1], '~t')
if not held[1] or held[2] ~= ARGV[2] then
  return 0
end
if redis.call('pttl', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('pexpire', KEYS[1], ARGV[3])
end
return 1
