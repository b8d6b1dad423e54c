-- The stored outcome of a request, read without deciding anything: what a
-- press replays when the instance already knows the coupon sold out, what a
-- lottery's registration and the reconciler's finishing of a borrow read.
-- The same record grab.lua would replay, under the same rules: only one this
-- shard's state wrote (lib.lua, own_record()), and a win or a reservation
-- only from state that may sell (verified()).
-- KEYS: 1 meta, 2 req
-- Returns {} (no record of this state) | {'RECORD', record}
--       | {'UNVERIFIED'} (the record cannot be judged yet: BUSY)
local stored = redis.call('GET', KEYS[2])
local record = own_record(KEYS[1], stored)
if record then
  if string.sub(record, 1, 2) ~= 'L|' and not verified(KEYS[1]) then return {'UNVERIFIED'} end
  return {'RECORD', record}
end
-- A record with no state under it (the shard dropped or lost, and not
-- rebuilt yet) may be a win the rebuild restores: not known yet.
if stored and not incarnation(KEYS[1]) then return {'UNVERIFIED'} end
return {}
