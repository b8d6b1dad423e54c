-- Called on every shard after stock was added anywhere in the coupon (an
-- operator's refill, a rebuild), and before a repair that may bring stock
-- back (a rebuild, a restarted shard's check): invalidates the shard's
-- "sold out" stamp, so no grab answers SOLD_OUT from a scan made before.
-- KEYS: 1 meta
-- Returns 1 if the shard has state, else 0.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], 'epoch', 1)
redis.call('HDEL', KEYS[1], 'soldout')
return 1
