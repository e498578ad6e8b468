-- Semaphores. A permit id is "<client uuid>:<owner tag>:<n>#<permits>": the
-- lease zset alone tells what a crashed holder held. Uses common.lua.

-- The permits a permit id holds, or 0 for a malformed id.
local function permits_of(id)
  return tonumber(string.match(id, '#(%d+)$')) or 0
end

-- The client uuid of a permit id (its first 36 characters).
local function client_of(id)
  return string.sub(id, 1, 36)
end

-- Reclaims the permits of acquisitions whose lease ended by `now` (crashed
-- holders). `used`: the permits in use before. Returns the permits in use
-- after, the earliest lease end left (nil: none), whether anything was
-- reclaimed (the caller then writes '~used') and nil; or an error reply
-- naming the lease zset as fourth value, before anything is written.
-- `first` (optional): the caller's read of the earliest lease
-- (ZRANGE 0 0 WITHSCORES), saving the script a second one.
local function reclaim_expired(leases, used, now, first)
  first = first or redis.pcall('zrange', leases, 0, 0, 'WITHSCORES')
  local err = read_error(first, leases, 'semaphore lease zset')
  if err then
    return nil, nil, false, err
  end
  if not first[2] then
    -- No lease left (the zset expired with its last lease): none in use.
    return 0, nil, used ~= 0, nil
  end
  if tonumber(first[2]) > now then
    return used, tonumber(first[2]), false, nil
  end
  for _, old in ipairs(redis.call('zrangebyscore', leases, '-inf', now)) do
    used = used - permits_of(old)
  end
  redis.call('zremrangebyscore', leases, '-inf', now)
  first = redis.call('zrange', leases, 0, 0, 'WITHSCORES')
  return math.max(0, used), tonumber(first[2]), true, nil
end
