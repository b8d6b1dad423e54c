-- Reserves one of the user's daily claims (across all coupons) before a grab,
-- keyed by the press: the same press reserving again (a retry, a replay)
-- finds its reservation and counts once.
-- KEYS: 1 blacklist flag, 2 the user's holds for the day
--       (hash "<coupon>:<requestId>" -> 1; its size is the day's claims)
-- ARGV: 1 daily limit (0 = no limit), 2 ttl (ms), 3 the press's key
-- Returns 'BLACKLISTED' | 'DAILY_LIMIT' | 'RESERVED' (taken now) | 'HELD'
--       (this press's own, taken before) | 'OK' (nothing reserved)
if redis.call('EXISTS', KEYS[1]) == 1 then return 'BLACKLISTED' end
local limit = tonumber(ARGV[1])
if limit <= 0 then return 'OK' end
if redis.call('HEXISTS', KEYS[2], ARGV[3]) == 1 then return 'HELD' end
if redis.call('HLEN', KEYS[2]) >= limit then return 'DAILY_LIMIT' end
redis.call('HSET', KEYS[2], ARGV[3], 1)
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 'RESERVED'
