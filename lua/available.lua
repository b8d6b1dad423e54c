-- The units one shard may sell now: what its waves have released, less
-- the leftovers of earlier waves with rollover off (lib.lua, sellable()). Read only, for the dry run's look at the
-- other shards and the coupon center's stock level.
-- KEYS: 1 meta
-- ARGV: 1 now (ms)
-- Returns {units}, or {} for a shard with no state
local m = redis.call('HMGET', KEYS[1], 'stock', 'waves', 'rollover')
if not m[1] then return {} end
local avail = sellable(tonumber(m[1]), m[2], m[3], tonumber(ARGV[1]))
return {tostring(math.max(0, avail))}
