-- The dry run of the risk reservation (risk_reserve_user.lua and
-- risk_reserve_ip.lua, in one slot each): whether a press would be refused,
-- changing nothing. Run once per slot: for the user with its two keys, for
-- the IP with its one.
-- KEYS (user): 1 blacklist flag, 2 the user's holds for the day
-- KEYS (ip):   1 the IP's users for the day
-- ARGV: 1 'user' or 'ip', 2 the limit (0 = no limit), 3 (ip) the user id
-- Returns 'BLACKLISTED' | 'DAILY_LIMIT' | 'IP_LIMIT' | 'OK'
local limit = tonumber(ARGV[2])
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
