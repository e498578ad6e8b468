-- Fencing tokens: the counter, the next token and the last one issued.
-- Uses common.lua.

-- The fencing counter (0 when missing) and nil, or nil and an error reply
-- naming it when it holds something else than an integer.
local function read_fence(fence)
  local v = redis.pcall('get', fence)
  local err = read_error(v, fence, 'fencing counter')
  if err then
    return nil, err
  end
  if not v then
    return 0, nil
  end
  local n = tonumber(v)
  if not n then
    return nil, redis.error_reply('WRONGTYPE ' .. fence .. ' is a string, not a redisync fencing counter')
  end
  return n, nil
end

-- The fencing token after `last`: max(last + 1, server time in
-- microseconds); see next_token.
local function token_after(last, now_us)
  -- reintroduce: token-counter-only
  return math.max(last + 1, now_us)
end

-- Issues a fencing token: max(counter + 1, server time in microseconds),
-- kept by the counter for ttl_ms. Tokens so never go back when the counter
-- is lost or behind (restart from an older snapshot, failover to a replica
-- that missed increments, expiry), as long as the server clock does not
-- step back, around the loss, by more than the time between the last token
-- before it and the first after. Microsecond times stay exact in Lua
-- numbers (below 2^53) until the year 2255. `current` is the counter as
-- read_fence returned it (scripts read it first, before any write).
--
-- `floor` (optional, a decimal string or nil): the caller's lower bound,
-- honoured when it is at most one second ahead of the server clock. A
-- Redlock passes the same floor to every node, so that their tokens agree
-- and no write-back round trip is needed.
--
-- `now_us` (optional): the server time the script read already (saves a
-- TIME call).
local function next_token(fence, ttl_ms, current, floor, now_us)
  if not now_us then
    local _
    _, now_us = server_time()
  end
  local n = token_after(current, now_us)
  local wanted = tonumber(floor)
  if wanted and wanted > n and wanted <= now_us + 1000000 then
    n = wanted
  end
  redis.call('set', fence, string.format('%.0f', n), 'PX', ttl_ms)
  return n
end

-- At least the last fencing token issued on `fence`, for a force-unlock's
-- answer (every acquisition with a token up to it ran before the script):
-- the counter, or the server time in us when the counter expired (a token
-- is never below the time of its grant). nil and an error reply naming the
-- counter when it holds something else.
local function last_issued(fence)
  local counter, err = read_fence(fence)
  if err then
    return nil, err
  end
  local _, now_us = server_time()
  return math.max(counter, now_us), nil
end
