-- The dry run of the risk reservation (risk_reserve_user.lua,
-- risk_reserve_ip.lua and risk_reserve_device.lua, in one slot each):
-- whether a press would be refused, changing nothing. Run once per slot:
-- for the user with its two keys, for the IP with its one, for the device
-- with its two (its users and its claims).
-- KEYS (user):   1 blacklist flag, 2 the user's holds for the day
-- KEYS (ip):     1 the IP's users for the day
-- KEYS (device): 1 the device's users for the day, 2 its claims for the day
-- ARGV: 1 'user', 'ip' or 'device', 2 the limit (0 = no limit; for the
--       device, of distinct users), 3 (ip, device) the user id, 4 (device)
--       the limit of claims
-- Returns 'BLACKLISTED' | 'DAILY_LIMIT' | 'IP_LIMIT' | 'DEVICE_USER_LIMIT'
--       | 'DEVICE_CLAIM_LIMIT' | 'OK'
local limit = tonumber(ARGV[2])
if ARGV[1] == 'device' then
  if limit > 0 and redis.call('HEXISTS', KEYS[1], ARGV[3]) == 0
     and redis.call('HLEN', KEYS[1]) >= limit then
    return 'DEVICE_USER_LIMIT'
  end
  local claims = tonumber(ARGV[4])
  if claims > 0 and redis.call('SCARD', KEYS[2]) >= claims then
    return 'DEVICE_CLAIM_LIMIT'
  end
  return 'OK'
end
if ARGV[1] == 'user' then
  if redis.call('EXISTS', KEYS[1]) == 1 then return 'BLACKLISTED' end
  if limit > 0 and redis.call('HLEN', KEYS[2]) >= limit then return 'DAILY_LIMIT' end
  return 'OK'
end
if limit > 0 and redis.call('HEXISTS', KEYS[1], ARGV[3]) == 0
   and redis.call('HLEN', KEYS[1]) >= limit then
  return 'IP_LIMIT'
end
return 'OK'
