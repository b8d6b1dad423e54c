-- Rebuild step 1 of 2: writes per-user claim counts into a lost shard.
-- Refused once the shard has state again (its meta is the "open" marker and
-- is written last), so a slow second reconciler can never overwrite counts
-- that live grabs have since moved.
-- KEYS: 1 meta, 2 users
-- ARGV: user, count, user, count, ...
-- Returns 'EXISTS' | 'OK'
if redis.call('EXISTS', KEYS[1]) == 1 then return 'EXISTS' end
for i = 1, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
end
return 'OK'
