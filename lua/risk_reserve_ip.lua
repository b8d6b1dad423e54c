-- Reserves the user's place among the distinct users seen from one IP today.
-- A hash of user -> in-flight-or-won grabs, so concurrent grabs by the same
-- user count once and a failed one releases only its own reference.
-- KEYS: 1 the IP's user hash for the day
-- ARGV: 1 user id, 2 limit of distinct users (0 = no limit), 3 ttl (ms)
-- Returns 'IP_LIMIT' | 'RESERVED' | 'OK' (nothing reserved)
local limit = tonumber(ARGV[2])
if limit <= 0 then return 'OK' end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0
   and redis.call('HLEN', KEYS[1]) >= limit then
  return 'IP_LIMIT'
end
if redis.call('HINCRBY', KEYS[1], ARGV[1], 1) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return 'RESERVED'
