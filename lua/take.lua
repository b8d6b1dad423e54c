-- Takes one unit from a donor shard for a claim reserved on another shard.
-- Idempotent per (user, ordinal): a retried borrow gets the same grant back.
-- KEYS: 1 meta, 2 outbox, 3 taken
-- ARGV: 1 user id, 2 ordinal, 3 request id, 4 now (ms)
-- Returns {'WIN', record} | {'EMPTY'} | {'NOT_FOUND'} | {'CLOSED', reason}
--       | {'UNVERIFIED'} (the server restarted since the shard was verified)
-- CLOSED ('OFFLINE' or 'ENDED'): the coupon is no longer on sale, so no unit
-- is taken, whenever the borrow runs (a retry, the reconciler finishing it
-- after its caller died).
local meta, outbox, taken = KEYS[1], KEYS[2], KEYS[3]
local user, ordinal, request_id, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

local field = ordinal .. ':' .. user
local prior = redis.call('HGET', taken, field)
if prior then
  -- Replayed only from state that may sell, as grab.lua replays a win: a
  -- restarted donor's take may be dropped with it by the check, and
  -- settled on the home meanwhile it would be a unit the rebuild counts
  -- nowhere.
  if not verified(meta) then return {'UNVERIFIED'} end
  return {'WIN', prior}
end

local m = redis.call('HMGET', meta, 'stock', 'status', 'end_ms', 'waves', 'rollover', 'sells_until_ms')
if not m[1] then return {'NOT_FOUND'} end
if m[2] ~= 'ONLINE' then return {'CLOSED', 'OFFLINE'} end
if tonumber(now) >= sells_until(m[3], m[6]) then return {'CLOSED', 'ENDED'} end
-- Not from state a restart may have rolled back (lib.lua, verified()),
-- not even an EMPTY: a borrow that heard only EMPTY stamps its home shard
-- sold out.
if not verified(meta) then return {'UNVERIFIED'} end
-- A donor gives only what its waves have released by now.
local avail, _, _, gone = sellable(tonumber(m[1]), m[4], m[5], tonumber(now))
expire(meta, gone)
local record = issue(meta, outbox, avail, user, ordinal, request_id, now)
if not record then return {'EMPTY'} end
redis.call('HSET', taken, field, record)
return {'WIN', record}
