-- Acquire or re-enter a reentrant lock.
-- KEYS[1]  lock hash: field <owner id> = hold count, field '~t' = fencing token
-- KEYS[2]  fencing counter (string, TTL ARGV[4]; see next_token in prelude.lua)
-- ARGV[1]  owner id "<client uuid>:<task id>"
-- ARGV[2]  lease, milliseconds (> 0)
-- ARGV[3]  token of the acquisition the caller holds and re-enters, or ''
--          for a fresh acquisition
-- ARGV[4]  fencing counter TTL, milliseconds
-- ARGV[5]  token floor (see next_token in prelude.lua), or '' for none
-- Returns {1, token} acquired, {2, token} re-entered (same token), {0, pttl ms} busy.
-- Field '~w' marks that another client tried while the lock was held.
-- A key of another type is an error naming it, before anything is written.
local lock, fence, owner, lease = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2])
-- PTTL first: a missing lock (the common, uncontended case) needs no HMGET.
local pttl = redis.call('pttl', lock)
local held = {false, false}
local err
if pttl ~= -2 then
  held = redis.pcall('hmget', lock, owner, '~t')
  err = read_error(held, lock, 'lock')
  if err then
    return err
  end
end
local counter
counter, err = read_fence(fence)
if err then
  return err
end

local function grant()
  local token = next_token(fence, ARGV[4], counter, ARGV[5])
  redis.call('hset', lock, owner, 1, '~t', string.format('%.0f', token))
  redis.call('pexpire', lock, lease)
  return {1, token}
end

if pttl == -2 then
  return grant()
end

if held[1] then
  if held[2] ~= ARGV[3] then
    -- Left by an acquisition of this owner that the caller no longer holds
    -- (its release never arrived): a fresh acquisition replaces it, with a
    -- new token, so nothing carrying the old token matches it any more.
    return grant()
  end
  redis.call('hincrby', lock, owner, 1)
  -- Re-entry never shortens the lease: PTTL becomes max(PTTL, lease).
  if pttl < lease then
    redis.call('pexpire', lock, lease)
  end
  return {2, tonumber(held[2])}
end

-- Busy: tell the holder that another client contends (the releasing client
-- then lets remote waiters in now and then instead of its own queue). Only
-- our own locks (with a token) are marked.
if held[2] then
  redis.call('hset', lock, '~w', 1)
end
return {0, pttl}
