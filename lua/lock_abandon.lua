-- Undo an acquisition whose reply never reached the caller (its future was
-- cancelled, or the command timed out): the lock may or may not have been taken.
-- KEYS[1]  lock hash
-- ARGV[1]  owner id
-- ARGV[2]  token to keep ('' = none): the caller's earlier acquisition, which
--          a re-entrant attempt only counted up; the final release handles that
-- ARGV[3]  publish command: 'spublish' or 'publish'
-- ARGV[4]  unlock channel
-- Returns 1 if an acquisition of this owner was undone, 0 otherwise.
local err = wrong_type({KEYS[1], 'hash'})
if err then
  return err
end
local held = redis.call('hmget', KEYS[1], ARGV[1], '~t')
if not held[1] or held[2] == ARGV[2] then
  return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[3], ARGV[4], 'unlock')
return 1
