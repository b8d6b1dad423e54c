-- Rebuild, before the shard reopens: the stored outcome of each request
-- that won a coupon DynamoDB holds, so a retry of a press told SUCCESS
-- (whose answer may never have arrived) replays that grant after Redis lost
-- everything, instead of being decided afresh. Like restore_users.lua,
-- refused once the shard has state again (its meta is written last), and
-- never over a record a live grab has since written.
-- KEYS: 1 meta, 2.. the request keys (T:req:<user>:<requestId>)
-- ARGV: 1 how long a record lives (ms), 2.. the record for each key, in order
-- Returns 'EXISTS' | 'OK'
if redis.call('EXISTS', KEYS[1]) == 1 then return 'EXISTS' end
local ttl = tonumber(ARGV[1])
for i = 2, #KEYS do
  redis.call('SET', KEYS[i], ARGV[i], 'PX', ttl, 'NX')
end
return 'OK'
