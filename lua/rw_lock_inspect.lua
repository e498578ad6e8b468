-- Read-only view of a read-write lock for one owner and side.
-- KEYS[1]  hash
-- ARGV[1]  owner id
-- ARGV[2]  'r' or 'w'
-- Returns {mode: 0 free, 1 read, 2 write; pttl ms (-2 free); holds of the owner on that side}.
local err = wrong_type({KEYS[1], 'hash'})
if err then
  return err
end
if redis.call('exists', KEYS[1]) == 0 then
  return {0, -2, 0}
end
local mode = redis.call('hget', KEYS[1], '~mode')
local m = 0
if mode == 'read' then m = 1 elseif mode == 'write' then m = 2 end
local field = 'w:' .. ARGV[1]
if ARGV[2] == 'r' then field = 'r:' .. ARGV[1] end
return {m, redis.call('pttl', KEYS[1]), tonumber(redis.call('hget', KEYS[1], field) or '0')}
