-- The dry run of a press on the user's home shard: the answer a press would
-- get from this shard now, deciding exactly what grab.lua's admission
-- decides (lib.lua, refusal()), and changing nothing: no token taken, no
-- record, no reservation. A read-only script (no write command), so it
-- may also run on a replica.
-- KEYS: 1 meta, 2 users
-- ARGV: 1 user id, 2 member level, 3 now (ms), 4 '1' if the caller carries
--       a verified device id
-- Returns a refusal as grab.lua does ({'NOT_FOUND'}, {'OFFLINE'},
-- {'NOT_STARTED', startMs}, {'ENDED'}, {'NOT_ELIGIBLE', minLevel},
-- {'DEVICE_REQUIRED'},
-- {'SOLD_OUT'}, {'ALREADY_CLAIMED'}, {'RATE_LIMITED', retryAfterMs}), or
--   {'OPEN'}   this shard has stock: a press would win here
--   {'EMPTY', nextWaveAtMs?}  this shard has nothing released left but
--              others may: a press would borrow (the caller looks at the
--              other shards' stock); with the next wave's instant if any
local refused, _, _, avail, next_at = refusal(KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), 'look', ARGV[4])
if refused then return refused end
if avail > 0 then return {'OPEN'} end
return {'EMPTY', next_at}
