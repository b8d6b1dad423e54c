-- Rebuild: writes one hash of a lost shard before it reopens: the per-user
-- claim counts (`users`), or the units the shard gave borrows that DynamoDB
-- holds (`taken`, so a borrow still open replays its unit instead of taking
-- a second one from the rebuilt shard).
-- Refused once the shard has state again (its meta is the "open" marker and
-- is written last), so a slow second reconciler can never overwrite fields
-- that live grabs have since moved.
-- KEYS: 1 meta, 2 the hash
-- ARGV: field, value, field, value, ...
-- Returns 'EXISTS' | 'OK'
if redis.call('EXISTS', KEYS[1]) == 1 then return 'EXISTS' end
for i = 1, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
end
return 'OK'
