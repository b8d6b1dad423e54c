-- Rebuild, before the shard reopens: the outbox entries of the grants this
-- shard minted that are still on their way (their claims in DynamoDB, not
-- issued or rejected yet), each under its own stream id <seq>-0 as issue()
-- in lib.lua wrote it, so the rebuilt shard counts them pending (the stock
-- equation holds) and the reconciler can re-drive one whose send never
-- happened. Like restore_hash.lua, refused once the shard has state again
-- (its meta is written last). The new state's sequence starts above every
-- one of them, so no new grant takes an id of theirs.
--
-- The stream may exist already: a dropped shard keeps its outbox
-- (verify.lua), and a run that died wrote some entries. An entry already
-- there stays as it is. A stream only takes ids above the highest it ever
-- held, which entries trimmed since may have raised above every entry left,
-- so when an entry is missing the stream is written afresh, every entry in
-- order of its sequence.
-- KEYS: 1 meta, 2 outbox
-- ARGV: per entry: seq, grant_id, coupon_id, user_id, ordinal,
--       request_id, shard, granted_at_ms
-- Returns 'EXISTS' | 'OK'
if redis.call('EXISTS', KEYS[1]) == 1 then return 'EXISTS' end
local entries, have = {}, {}
for _, e in ipairs(redis.call('XRANGE', KEYS[2], '-', '+')) do
  local seq = tonumber(string.match(e[1], '^(%d+)'))
  have[seq] = true
  entries[#entries + 1] = {seq, e[1], e[2]}
end
local missing = false
for i = 1, #ARGV, 8 do
  local seq = tonumber(ARGV[i])
  if not have[seq] then
    have[seq] = true
    missing = true
    entries[#entries + 1] = {seq, ARGV[i] .. '-0', {
      'grant_id', ARGV[i + 1], 'coupon_id', ARGV[i + 2], 'user_id', ARGV[i + 3],
      'ordinal', ARGV[i + 4], 'request_id', ARGV[i + 5], 'shard', ARGV[i + 6],
      'granted_at_ms', ARGV[i + 7]}}
  end
end
if not missing then return 'OK' end
table.sort(entries, function(a, b) return a[1] < b[1] end)
redis.call('DEL', KEYS[2])
for _, e in ipairs(entries) do
  redis.call('XADD', KEYS[2], e[2], unpack(e[3]))
end
return 'OK'
