-- Read-only view of a lock for one owner.
-- KEYS[1]  lock hash
-- ARGV[1]  owner id
-- Returns {locked 0/1, pttl ms (-2 when unlocked), hold count of the owner}.
-- A key of another type is an error.
local err = wrong_type({KEYS[1], 'hash'})
if err then
  return err
end
if redis.call('exists', KEYS[1]) == 0 then
  return {0, -2, 0}
end
return {1, redis.call('pttl', KEYS[1]), tonumber(redis.call('hget', KEYS[1], ARGV[1]) or '0')}
