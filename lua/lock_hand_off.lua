-- Hand an acquisition of a reentrant lock (or a fair lock: the same hash
-- layout) off from one owner id to another: the field moves, everything
-- else stays (hold count, fencing token, lease, contention and identity
-- fields). The old owner then holds nothing, so it no longer re-enters.
-- KEYS[1]  lock hash: field <owner id> = hold count, field '~t' = fencing token
-- ARGV[1]  owner: owner id the acquisition is bound to
-- ARGV[2]  new_owner: the new owner id (unique: nobody else has it)
-- ARGV[3]  token: fencing token of the acquisition
-- ARGV[4]  what: what the key is, for a wrong-type error ('lock', 'fair
--          lock')
-- Returns 1 handed off (also when a repeat finds it handed off already),
-- 0 when that acquisition no longer holds the lock (nothing written).
-- A key of another type is an error naming it, before anything is written.
local lock, from, to = KEYS[1], ARGV[1], ARGV[2]
local held = redis.pcall('hmget', lock, from, to, '~t')
local err = read_error(held, lock, ARGV[4])
if err then
  return err
end
if held[3] ~= ARGV[3] then
  return 0
end
if held[1] then
  -- HSET keeps the key's TTL: the lease is untouched.
  redis.call('hdel', lock, from)
  redis.call('hset', lock, to, held[1])
  return 1
end
if held[2] then
  return 1
end
return 0
