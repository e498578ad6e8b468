-- Release one hold (or the owner's whole hold) of a reentrant lock.
-- KEYS[1]  lock hash
-- ARGV[1]  owner id
-- ARGV[2]  fencing token of the acquisition being released
-- ARGV[3]  '1' = last local hold: drop the owner's field whatever its count
-- ARGV[4]  publish command: 'spublish' (Redis >= 7) or 'publish'
-- ARGV[5]  unlock channel (an argument, not a key: a key the node does not
--          have would make a cluster refuse the script mid-migration)
-- Returns 0 not held by this owner/acquisition (nothing written, nothing
-- published), 1 still held (re-entrant), 2 released (nobody else had tried:
-- nothing published), 3 released and waiters told (another client had tried
-- to take it meanwhile).
local lock, owner = KEYS[1], ARGV[1]
local held = redis.pcall('hmget', lock, owner, '~t', '~w')
local err = read_error(held, lock, 'lock')
if err then
  return err
end
if not held[1] or held[2] ~= ARGV[2] then
  return 0
end
if ARGV[3] ~= '1' and tonumber(held[1]) > 1 then
  redis.call('hincrby', lock, owner, -1)
  return 1
end
redis.call('del', lock)
-- Only waiters of other clients listen (local ones queue in their client),
-- and every one of them marked '~w' with its last failed attempt: publish
-- only then.
if held[3] then
  redis.call(ARGV[4], ARGV[5], 'unlock')
  return 3
end
return 2
