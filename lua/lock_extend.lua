-- Set the remaining lease of a lock this acquisition still holds.
-- KEYS[1]  lock hash
-- ARGV[1]  owner id
-- ARGV[2]  fencing token of the acquisition
-- ARGV[3]  new lease, milliseconds
-- Returns 1 extended, 0 not held (nothing written).
local err = wrong_type({KEYS[1], 'hash'})
if err then
  return err
end
local held = redis.call('hmget', KEYS[1], ARGV[1], '~t')
if not held[1] or held[2] ~= ARGV[2] then
  return 0
end
redis.call('pexpire', KEYS[1], ARGV[3])
return 1
