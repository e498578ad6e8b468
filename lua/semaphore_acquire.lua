-- Take permits of a lease-bound semaphore.
-- KEYS[1]  semaphore hash: '~permits' the total, '~used' permits held, '~t'
--          the last fencing token, '~w' clients whose waiters need a release
--          message (see below)
-- KEYS[2]  lease zset: <permit id> -> lease end, server time in ms (the id
--          says how many permits it holds, see permits_of in prelude.lua)
-- ARGV[1]  permit id (unique per acquisition)
-- ARGV[2]  lease, milliseconds
-- ARGV[3]  the permit total the handle declares ('' for none): set when the
--          semaphore is not set up
-- Returns {1, token, free, ms} acquired, `free` permits left after it, `ms`
-- until the earliest lease ends; {0, ms} busy (ms: -1 when no lease ends);
-- {-1, 0} not initialised; {-2, total} more permits than the semaphore has.
-- Expired acquisitions (crashed holders) are reclaimed first. A key of
-- another type is an error naming it, before anything is written.
--
-- '~w' is the uuid of the one client that waits, or '*' for several. A busy
-- attempt marks its client, and so does a grant that takes the last permit
-- (that client's next waiter then waits without asking). A release by
-- another client than the marked one publishes and clears the mark; a
-- client's own waiters are woken by the client itself.
local sem, leases = KEYS[1], KEYS[2]
local id, lease = ARGV[1], tonumber(ARGV[2])
local wanted = permits_of(id)
local h = redis.pcall('hmget', sem, '~permits', '~used', '~t', '~w')
local err = read_error(h, sem, 'semaphore')
if err then
  return err
end
local total = tonumber(h[1])
if not total then
  -- Not set up (never, or lost in a restart): a handle that declares its
  -- total sets it up now, in this script.
  total = tonumber(ARGV[3])
  if not total then
    return {-1, 0}
  end
  redis.call('hset', sem, '~permits', total)
end
if wanted > total then
  return {-2, total}
end
local now, now_us = server_time()
local used, first, reclaimed
used, first, reclaimed, err = reclaim_expired(leases, tonumber(h[2] or '0'), now)
if err then
  return err
end

local me, waiting = client_of(id), h[4]
local mark = waiting
if waiting ~= me and waiting ~= '*' then
  mark = waiting and '*' or me
end

if total - used >= wanted then
  local token = token_after(tonumber(h[3] or '0'), now_us)
  used = used + wanted
  local ends = now + lease
  if used >= total then
    redis.call('hset', sem, '~used', used, '~t', string.format('%.0f', token), '~w', mark)
  else
    redis.call('hset', sem, '~used', used, '~t', string.format('%.0f', token))
  end
  redis.call('zadd', leases, ends, id)
  if first and first < ends then
    ends = first
  end
  return {1, token, total - used, ends - now}
end
if reclaimed or mark ~= waiting then
  redis.call('hset', sem, '~used', used, '~w', mark)
end
if first then
  return {0, math.max(0, first - now)}
end
return {0, -1}
