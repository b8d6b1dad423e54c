-- A lottery's registration on the user's home shard, read only: what the
-- shard refuses an entry with (the registration window, the level, a
-- device the coupon requires), or the entry the user made before. The
-- entry itself is written to DynamoDB (the draw reads it there), then
-- remembered here (HSET on the same key) so that a repeat ends in this one
-- round trip.
-- KEYS: 1 meta, 2 entries (hash user -> registered at, ms)
-- ARGV: 1 user id, 2 member level, 3 now (ms), 4 '1' if the caller carries
--       a verified device id
-- Returns {'OPEN'} | {'ENTERED', registeredAtMs} | {'NOT_FOUND'}
--       | {'OFFLINE'} | {'FIRST_COME'} (not a lottery) | {'NOT_STARTED', startMs}
--       | {'ENDED'} | {'NOT_ELIGIBLE', minLevel} | {'DEVICE_REQUIRED'}
local m = redis.call('HMGET', KEYS[1], 'status', 'start_ms', 'end_ms', 'min_level', 'device', 'mode')
local now = tonumber(ARGV[3])
if not m[1] then return {'NOT_FOUND'} end
if m[1] ~= 'ONLINE' then return {'OFFLINE'} end
if m[6] ~= 'LOTTERY' then return {'FIRST_COME'} end
-- A repeat answers the first registration, even after the window (a
-- retry of one whose answer was lost).
local at = redis.call('HGET', KEYS[2], ARGV[1])
if at then return {'ENTERED', at} end
if now < tonumber(m[2]) then return {'NOT_STARTED', m[2]} end
if now >= tonumber(m[3]) then return {'ENDED'} end
if tonumber(ARGV[2]) < tonumber(m[4]) then return {'NOT_ELIGIBLE', m[4]} end
if m[5] == '1' and ARGV[4] ~= '1' then return {'DEVICE_REQUIRED'} end
return {'OPEN'}
