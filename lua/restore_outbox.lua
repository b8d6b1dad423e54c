-- Rebuild, before the shard reopens: the outbox entries of the grants this
-- shard minted that are still on their way (their claims in DynamoDB, not
-- issued or rejected yet), each under its own stream id <seq>-0 as issue()
-- in lib.lua wrote it, so the rebuilt shard counts them pending (the stock
-- equation holds) and the reconciler can re-drive one whose send never
-- happened. Like restore_hash.lua, refused once the shard has state again
-- (its meta is written last). The new state's sequence starts above every
-- one of them, so no new grant takes an id of theirs.
-- KEYS: 1 meta, 2 outbox
-- ARGV: per entry, in ascending seq: seq, grant_id, coupon_id, user_id,
--       ordinal, request_id, shard, granted_at_ms
-- Returns 'EXISTS' | 'OK'
if redis.call('EXISTS', KEYS[1]) == 1 then return 'EXISTS' end
-- A run that died after writing some: those are there already.
local last = 0
local top = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)[1]
if top then last = tonumber(string.match(top[1], '^(%d+)')) end
for i = 1, #ARGV, 8 do
  local seq = tonumber(ARGV[i])
  if seq > last then
    redis.call('XADD', KEYS[2], ARGV[i] .. '-0',
      'grant_id', ARGV[i + 1], 'coupon_id', ARGV[i + 2], 'user_id', ARGV[i + 3],
      'ordinal', ARGV[i + 4], 'request_id', ARGV[i + 5], 'shard', ARGV[i + 6],
      'granted_at_ms', ARGV[i + 7])
    last = seq
  end
end
return 'OK'
