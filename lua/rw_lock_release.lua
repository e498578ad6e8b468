-- Release one hold of a read-write lock, or undo a lost acquisition.
-- KEYS[1]  hash (see rw_lock_acquire.lua)
-- KEYS[2]  readers zset
-- KEYS[3]  waiting writers zset (an undo of the write side drops the mark)
-- ARGV[1]  owner id
-- ARGV[2]  fencing token
-- ARGV[3]  '1' = last local hold: drop the owner's side whatever its count
-- ARGV[4]  'r' or 'w'
-- ARGV[5]  publish command
-- ARGV[6]  channel
-- ARGV[7]  '=' release the acquisition with this token; '!' undo any
--          acquisition of this owner and side except this token ('' = none)
-- Returns 0 not held (nothing written or published, but an undo of a
-- waiting writer's mark), 1 still held, 2 released.
-- A release that frees the lock or turns it to read mode publishes, so
-- waiting writers, or all waiting readers, try again.
local h, readers, writers, channel = KEYS[1], KEYS[2], KEYS[3], ARGV[6]
local owner, token, last, side, publish, match = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[7]
local err = wrong_type({h, 'hash', readers, 'zset', writers, 'zset'})
if err then
  return err
end
if match == '!' and side == 'w' and redis.call('zrem', writers, owner) == 1 then
  -- A writer that stopped waiting: readers it held back try again.
  redis.call(publish, channel, 'released')
end
local count_field, token_field = 'w:' .. owner, '~t'
if side == 'r' then
  count_field, token_field = 'r:' .. owner, 't:' .. owner
end
local held = redis.call('hmget', h, count_field, token_field)
if not held[1] then
  return 0
end
if (match == '=' and held[2] ~= token) or (match == '!' and held[2] == token) then
  return 0
end
if last ~= '1' and tonumber(held[1]) > 1 then
  redis.call('hincrby', h, count_field, -1)
  return 1
end
redis.call('hdel', h, count_field, token_field)
if side == 'r' then
  redis.call('zrem', readers, owner)
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('zremrangebyscore', readers, '-inf', now)
local live_readers = redis.call('zcard', readers)
if side == 'w' then
  if live_readers > 0 then
    -- Downgrade: the writer keeps read holds; waiting readers may join.
    redis.call('hset', h, '~mode', 'read')
  else
    redis.call('del', h, readers)
  end
  redis.call(publish, channel, 'released')
  return 2
end
if redis.call('hget', h, '~mode') == 'read' and live_readers == 0 then
  redis.call('del', h, readers)
  redis.call(publish, channel, 'released')
end
return 2
