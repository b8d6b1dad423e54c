-- Reserves the press's place on one device for the day, keyed by the press:
-- among the device's distinct users (at most K), and, for a press (not a
-- lottery registration), one of its claims (at most M). The same press
-- reserving again finds its reservation and counts once; a user already
-- seen on the device may press again however many users it has seen, but
-- not past its claims.
-- KEYS: 1 the device's users for the day (hash user -> presses holding a place)
--       2 the device's holds for the day (set "<user>|<coupon>:<requestId>":
--         every press and registration holding a place)
--       3 the device's claims for the day (the holds that are claims; its
--         size is the day's claims on the device)
-- ARGV: 1 user id, 2 limit of distinct users (0 = no limit), 3 limit of
--       claims (0 = no limit), 4 ttl (ms), 5 the press's key, 6 '1' for a
--       claim (a press), '0' for a lottery registration (never a claim)
-- Returns 'DEVICE_USER_LIMIT' | 'DEVICE_CLAIM_LIMIT' | 'RESERVED' (taken
--       now) | 'HELD' (this press's own, taken before: a refused copy of
--       the press must not give it back) | 'OK' (no limit: nothing reserved)
local users, claims = tonumber(ARGV[2]), tonumber(ARGV[3])
local counts = ARGV[6] == '1'
if not counts then claims = 0 end
if users <= 0 and claims <= 0 then return 'OK' end
local member = ARGV[1] .. '|' .. ARGV[5]
if redis.call('SISMEMBER', KEYS[2], member) == 1 then return 'HELD' end
if users > 0 and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0
   and redis.call('HLEN', KEYS[1]) >= users then
  return 'DEVICE_USER_LIMIT'
end
if claims > 0 and redis.call('SCARD', KEYS[3]) >= claims then
  return 'DEVICE_CLAIM_LIMIT'
end
redis.call('SADD', KEYS[2], member)
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
if counts then
  redis.call('SADD', KEYS[3], member)
  redis.call('PEXPIRE', KEYS[3], ARGV[4])
end
return 'RESERVED'
