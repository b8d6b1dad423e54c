-- Gives back what a risk reservation took, when the grab did not succeed.
-- KEYS: 1 the counter or hash that was reserved
-- ARGV: 1 '' for the user's daily counter, else the user id in the IP hash
-- Never goes below zero, even if the key expired in between (day rollover).
if ARGV[1] == '' then
  local n = tonumber(redis.call('GET', KEYS[1]) or '0')
  if n > 0 then redis.call('DECR', KEYS[1]) end
  return 1
end
if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) <= 0 then
  redis.call('HDEL', KEYS[1], ARGV[1])
end
return 1
