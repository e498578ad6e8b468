-- Count-down latches (see latch_set_count.lua for the layout). Uses
-- common.lua.

-- The latch hash read: {count left, id, TTL ms} (count nil when the latch
-- is not set), or nil and an error reply naming the key when it is not a
-- latch: another type, or a hash without a whole count, an id and a TTL.
local function read_latch(latch, record, forget)
  local seen = redis.pcall('hmget', latch, 'n', 'id', 't')
  local err = read_error(seen, latch, 'count-down latch')
  if err then
    return nil, err
  end
  local kind = redis.call('type', record).ok
  if kind ~= 'none' and kind ~= 'hash' then
    return nil, redis.error_reply('WRONGTYPE ' .. record .. ' is not a redisync count-down record')
  end
  if forget then
    kind = redis.call('type', forget).ok
    if kind ~= 'none' and kind ~= 'zset' then
      return nil, redis.error_reply('WRONGTYPE ' .. forget .. ' is not a redisync count-down record index')
    end
  end
  if not (seen[1] or seen[2] or seen[3]) and redis.call('exists', latch) == 0 then
    return {nil, nil, nil}, nil
  end
  local n, t = seen[1], seen[3]
  if not (n and t and seen[2] and string.match(n, '^%d+$') and string.match(t, '^%d+$')) then
    return nil, redis.error_reply('WRONGTYPE ' .. latch .. ' is not a redisync count-down latch')
  end
  return {tonumber(n), seen[2], tonumber(t)}, nil
end

-- Forgets what the latch's record (a hash) no longer needs: the fields
-- that its index `forget` (a zset: field -> when it may be forgotten,
-- server ms) says ended by `now`. Each field is forgotten once, so the
-- work is that of the writes that made them.
local function forget_old(record, forget, now)
  local old = redis.call('zrangebyscore', forget, '-inf', now)
  if #old == 0 then
    return
  end
  for i = 1, #old, 1000 do
    redis.call('hdel', record, unpack(old, i, math.min(i + 999, #old)))
  end
  redis.call('zremrangebyscore', forget, '-inf', now)
end
