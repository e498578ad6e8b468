-- Undo an acquisition whose reply never reached the caller (its future was
-- cancelled, or the command timed out): the lock may or may not have been taken.
-- KEYS[1]  lock hash
-- KEYS[2]  unlock channel
-- ARGV[1]  owner id
-- ARGV[2]  token to keep ('' = none): the caller's earlier acquisition, which
--          a re-entrant attempt only counted up; the final release handles that
-- ARGV[3]  publish command: 'spublish' or 'publish'
-- Returns 1 if an acquisition of this owner was undone, 0 otherwise.
local held = redis.call('hmget', KEYS[1], ARGV[1], '~t')
if not held[1] or held[2] == ARGV[2] then
  return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[3], KEYS[2], 'unlock')
return 1
