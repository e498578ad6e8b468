-- Semaphores: hand-off to the oldest waiters. The wait queue holds
-- "<lease ms> <number> <permit id>", oldest first (the number names the
-- entry, as a lock's).
-- Uses common.lua, tokens.lua and semaphore.lua.

-- '~w' after client `me` gets waiters that wait without a queue entry:
-- the one client's uuid, or '*' for several.
local function mark_with(waiting, me)
  if waiting == me or waiting == '*' then
    return waiting
  end
  return waiting and '*' or me
end

-- Hands free permits (s.total - s.used) to the queue's heads, oldest
-- first, while the head's ask fits: each is granted (its lease from now,
-- the next fencing token after s.last) and told by
-- "g:<token>:<number>/<free>:<id>" with the permits left free. A head that
-- does not fit stops it (FIFO: a large ask is never passed over); an entry
-- asking more than the total, or not one of ours, is dropped. A hand-off
-- that takes the last permit marks its client in s.mark, as a grant does
-- (its next waiter then waits for a release without asking). `me`: the
-- caller's permit id, granted without a message. Updates s.used, s.last,
-- s.mark, and s.to_others (some went to another client than s.client);
-- returns whether the queue was found empty, the token granted to
-- `me` (nil: none), and an error reply naming the queue when it is not a
-- list (then nothing was written).
local function hand_permits(s, leases, queue, publish, channel, me)
  -- The caller's grant does not stop the hand-off: entries behind it that
  -- fit in what is left get theirs too (nobody else would tell them).
  local mine = nil
  while s.total - s.used > 0 do
    local entry = redis.pcall('lpop', queue)
    if type(entry) == 'table' then
      return true, mine, read_error(entry, queue, 'semaphore queue')
    end
    if not entry then
      return true, mine
    end
    local lease, number, id = string.match(entry, '^(%d+) (%d+) (.+)$')
    local wanted = id and permits_of(id) or 0
    if wanted > 0 and wanted <= s.total then
      if wanted > s.total - s.used then
        redis.call('lpush', queue, entry)
        -- The LPOP took the last entry, so the key was made anew.
        if redis.call('pttl', queue) == -1 then
          redis.call('pexpire', queue, 2 * tonumber(lease) + 1000)
        end
        return false, mine
      end
      -- Nothing in use: the zset is likely gone with its last lease.
      local likely_new = s.used == 0
      s.used = s.used + wanted
      s.last = token_after(s.last, s.now_us)
      redis.call('zadd', leases, s.now + tonumber(lease), id)
      keep_at_least(leases, tonumber(lease), publish == 'spublish', false, likely_new)
      if s.used >= s.total then
        s.mark = mark_with(s.mark, client_of(id))
      end
      if client_of(id) ~= s.client then
        s.to_others = true
      end
      if id == me then
        mine = s.last
      else
        redis.call(publish, channel, 'g:' .. string.format('%.0f', s.last) .. ':' .. number .. '/' .. (s.total - s.used) .. ':' .. id)
      end
    end
  end
  return false, mine
end
