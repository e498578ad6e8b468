-- Store what a holder says about itself (a leader's identity) in the lock
-- hash, field '~i': it lives and goes with the lock.
-- KEYS[1]  lock hash
-- ARGV[1]  owner: owner id
-- ARGV[2]  token: fencing token of the acquisition
-- ARGV[3]  identity: what the holder says about itself
-- ARGV[4]  publish: publish command: 'spublish' or 'publish'
-- ARGV[5]  channel: the lock's channel: watchers of the election hear of
--          the change ('i': not a hand-off, it wakes no waiter that waits
--          for one)
-- Returns 1 stored, 0 when that acquisition does not hold the lock (nothing
-- written).
local held = redis.pcall('hmget', KEYS[1], ARGV[1], '~t')
local err = read_error(held, KEYS[1], 'lock')
if err then
  return err
end
if not held[1] or held[2] ~= ARGV[2] then
  return 0
end
redis.call('hset', KEYS[1], '~i', ARGV[3])
redis.call(ARGV[4], ARGV[5], 'i')
return 1
