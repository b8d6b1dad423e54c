-- Applies an operator's change to one shard: status, rate, and the shard's
-- share of the total stock, at a definition version. Idempotent and ordered:
-- a shard that has applied this version (or a newer one) changes nothing, so
-- a retry or a late, older change can never roll a shard back.
--
-- Phase 1 of two. It does not touch the shard's sold-out epoch: a borrow
-- homed here could otherwise scan a shard not yet given its new stock and
-- stamp this shard sold out at the new epoch, for good. The caller bumps
-- every shard's epoch (bump_epoch.lua) once every shard has its stock, so
-- any stamp made in between carries the old epoch and dies.
-- KEYS: 1 meta
-- ARGV: 1 version, 2 fingerprint, 3 status, 4 rate (per shard), 5 burst (per
--       shard), 6 alloc (this shard's share of the total), 7 total stock,
--       8 the shard's release schedule (preheat.rs, schedule_of; '' without
--       waves)
-- Returns 'MISSING' (no state: a rebuild will use the durable definition)
--       | 'UNVERIFIED' (its server restarted since it was verified: left
--         as it is, so the reconciler's check judges the state the restart
--         left, finds it behind this version and drops it for the rebuild)
--       | 'CURRENT' (this version or a newer one is here) | 'APPLIED'
local meta = KEYS[1]
if redis.call('EXISTS', meta) == 0 then return 'MISSING' end
local m = redis.call('HMGET', meta, 'version', 'alloc', 'rate', 'burst')
local version = tonumber(ARGV[1])
if (tonumber(m[1]) or 0) >= version then return 'CURRENT' end
-- Added stock would make a shard that ran dry after its snapshot (and lent
-- its users' claims to borrows the snapshot never saw) look as if it never
-- had: the check (verify.lua) must see the state as restored.
if not verified(meta) then return 'UNVERIFIED' end
local alloc = tonumber(ARGV[6])
local add = alloc - (tonumber(m[2]) or alloc)
if add < 0 then
  return redis.error_reply('ERR stock share would shrink from ' .. m[2] .. ' to ' .. ARGV[6])
end
redis.call('HSET', meta, 'version', ARGV[1], 'fingerprint', ARGV[2], 'status', ARGV[3],
  'rate', ARGV[4], 'burst', ARGV[5], 'alloc', ARGV[6], 'total', ARGV[7],
  'waves', ARGV[8] or '')
if add > 0 then redis.call('HINCRBY', meta, 'stock', add) end
-- A new rate starts with a full bucket of the new burst.
if m[3] ~= ARGV[4] or m[4] ~= ARGV[5] then
  redis.call('HDEL', meta, 'tokens', 'bucket_ms')
end
return 'APPLIED'
