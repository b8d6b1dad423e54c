-- Rebuild, before the shard reopens: the stored outcome of each request
-- that won a coupon DynamoDB holds, so a retry of a press told SUCCESS
-- (whose answer may never have arrived) replays that grant after Redis lost
-- everything, instead of being decided afresh. Like restore_hash.lua,
-- refused once the shard has state again (its meta is written last).
-- Each record is stamped with the rebuilt state's incarnation (lib.lua,
-- own_record()) and written over an earlier incarnation's (with no state
-- under it no grab writes a record: what is there is a state's this one
-- replaces), never over a later one's: two rebuilds at once each write
-- their records, and only the higher base's opens the shard: it is staged
-- (KEYS[2], only ever raised), and preheat.lua refuses a lower one's meta.
-- KEYS: 1 meta, 2 the staged base (T:base), 3.. the request keys
--       (T:req:<user>:<requestId>)
-- ARGV: 1 how long a record lives (ms), 2 the incarnation (the state's
--       base), 3.. the record for each request key, in order
-- Returns 'EXISTS' | 'OK'
if redis.call('EXISTS', KEYS[1]) == 1 then return 'EXISTS' end
local ttl, base = tonumber(ARGV[1]), ARGV[2]
if tonumber(redis.call('GET', KEYS[2]) or '-1') < tonumber(base) then
  redis.call('SET', KEYS[2], base)
end
for i = 3, #KEYS do
  local at = string.match(redis.call('GET', KEYS[i]) or '', '#(%d+)$')
  if not at or tonumber(at) < tonumber(base) then
    redis.call('SET', KEYS[i], ARGV[i] .. '#' .. base, 'PX', ttl)
  end
end
return 'OK'
