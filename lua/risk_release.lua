-- Gives back what one press's risk reservation took, when its grab did not
-- win. Keyed by the press, so it is idempotent: a retried or repeated
-- release gives back nothing more (it can never free another press's
-- claim, so no user passes the daily limit through releases).
-- The user's daily claims:  KEYS: 1 the user's holds  ARGV: 1 '', 2 the press's key
-- The IP's distinct users, or the device's users and claims (the same shape):
--                           KEYS: 1 the IP's (device's) users, 2 its holds,
--                                 3 (device) its claims
--                           ARGV: 1 user id, 2 the press's key
if ARGV[1] == '' then
  redis.call('HDEL', KEYS[1], ARGV[2])
  return 1
end
local member = ARGV[1] .. '|' .. ARGV[2]
if redis.call('SREM', KEYS[2], member) == 1 then
  if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) <= 0 then
    redis.call('HDEL', KEYS[1], ARGV[1])
  end
end
if KEYS[3] then redis.call('SREM', KEYS[3], member) end
return 1
