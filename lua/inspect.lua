-- Read-only snapshot of the keys of one name (one cluster slot), for the
-- inspector: one script, so holders, queue and tokens are read at one instant.
-- KEYS     the keys to read
-- ARGV[1]  most_entries: most entries returned of a zset or a list (a
--          longer one is cut; its size tells by how much)
-- Returns {server time ms, then for every key {type, pttl ms, size, entries}}:
-- type as TYPE answers ('none' when missing); entries: a hash's fields and
-- values, a zset's members and scores (lowest first), a list's elements
-- (head first), a string's value, nothing for another type. Writes nothing.
local cap = tonumber(ARGV[1])
local now = server_time()
local out = {now}
for _, k in ipairs(KEYS) do
  local kind = redis.call('type', k).ok
  local size, entries = 0, {}
  if kind == 'hash' then
    entries = redis.call('hgetall', k)
    size = #entries / 2
  elseif kind == 'zset' then
    size = redis.call('zcard', k)
    entries = redis.call('zrange', k, 0, cap - 1, 'WITHSCORES')
  elseif kind == 'list' then
    size = redis.call('llen', k)
    entries = redis.call('lrange', k, 0, cap - 1)
  elseif kind == 'string' then
    size = 1
    entries = {redis.call('get', k)}
  end
  out[#out + 1] = {kind, redis.call('pttl', k), size, entries}
end
return out
