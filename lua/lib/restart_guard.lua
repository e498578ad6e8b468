-- Put in front of the acquisitions of locks, fair locks, read-write locks
-- and semaphores (the scripts that take the arguments below). Not a script
-- of its own: crates/redisync/src/redis/script.rs says which helper files
-- of lua/lib/ each script of lua/ is made of.

-- The restart guard of a guarded client's acquisition, before anything is
-- read or written. Its last three arguments: '~restart-guard', the bound in
-- seconds (max_lease plus a second of INFO's rounding), and the LASTSAVE
-- the client read on this server when it proved it old (or ''). LASTSAVE
-- is the server's start time or its last save: one that is neither that
-- value nor older than the bound belongs to a server that may have
-- restarted, even behind a proxy that kept the client's connection. The
-- script then does nothing, and the client reads the uptime (INFO) first.
-- reintroduce: restart-guard-per-connection-only
if #ARGV >= 3 and ARGV[#ARGV - 2] == '~restart-guard' then
  local saved = redis.call('lastsave')
  if tostring(saved) ~= ARGV[#ARGV] and tonumber(redis.call('time')[1]) - saved <= tonumber(ARGV[#ARGV - 1]) then
    return redis.error_reply('REDISYNC-RESTARTED the server may have restarted (LASTSAVE ' .. saved .. ')')
  end
end
