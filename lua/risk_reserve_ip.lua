-- Reserves the user's place among the distinct users seen from one IP today,
-- keyed by the press: the same press reserving again counts once, and a
-- user already seen from the IP may press again however full it is.
-- KEYS: 1 the IP's users for the day (hash user -> presses holding a place)
--       2 the IP's holds for the day (set "<user>|<coupon>:<requestId>")
-- ARGV: 1 user id, 2 limit of distinct users (0 = no limit), 3 ttl (ms),
--       4 the press's key
-- Returns 'IP_LIMIT' | 'RESERVED' (taken now) | 'HELD' (this press's own,
--       taken before) | 'OK' (nothing reserved)
local limit = tonumber(ARGV[2])
if limit <= 0 then return 'OK' end
local member = ARGV[1] .. '|' .. ARGV[4]
if redis.call('SISMEMBER', KEYS[2], member) == 1 then return 'HELD' end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0
   and redis.call('HLEN', KEYS[1]) >= limit then
  return 'IP_LIMIT'
end
redis.call('SADD', KEYS[2], member)
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 'RESERVED'
