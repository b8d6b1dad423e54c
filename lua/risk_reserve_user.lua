-- Reserves one of the user's daily claims (across all coupons) before a grab.
-- KEYS: 1 blacklist flag, 2 the user's claim counter for the day
-- ARGV: 1 daily limit (0 = no limit), 2 counter ttl (ms)
-- Returns 'BLACKLISTED' | 'DAILY_LIMIT' | 'RESERVED' | 'OK' (nothing reserved)
if redis.call('EXISTS', KEYS[1]) == 1 then return 'BLACKLISTED' end
local limit = tonumber(ARGV[1])
if limit <= 0 then return 'OK' end
local n = redis.call('INCR', KEYS[2])
if n == 1 then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end
if n > limit then
  redis.call('DECR', KEYS[2])
  return 'DAILY_LIMIT'
end
return 'RESERVED'
