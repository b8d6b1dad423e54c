-- The reconciler's check of a shard whose server restarted since the shard
-- was written or last verified (lib.lua, verified()): the state may be older
-- than grants users were told about (a snapshot), and sells nothing until
-- checked. First called to look (ARGV[2] empty), which records since when
-- the shard has been suspect on this history; once every grant sent before
-- the restart was found is claimed in DynamoDB (the send window has passed,
-- domain reconcile/wait.rs), called with the shard's durable high-water mark: a
-- sequence below it rolled back and is dropped (the rebuild restores it),
-- and so is a shard that had nothing to sell at some instant since its
-- state was last stamped (no stock left, or, with waves, all of it held
-- back: lib.lua, ran_dry()): claims homed on it may have been filled by
-- borrows, and a sold-out stamp set, neither of which moves its sequence.
-- Else every claim made on it since the snapshot minted on it,
-- so a sequence not behind the mark means the state holds every grant
-- issued: it is stamped with this history and sells again.
--
-- A current shard gets its time stamp (w) refreshed, so a replica running
-- since before this pass can be promoted without a check (lib.lua).
-- Atomic, so a shard verified, rebuilt or restarted again meanwhile is
-- judged as it is now.
-- KEYS: 1 meta, 2 users, 3 outbox (kept by a drop, but a replaced state's),
--       4 taken, 5 borrowing
-- ARGV: 1 now (ms), 2 the durable high-water mark, or '' to only look,
--       3 (with a mark) the durable definition's version
-- Returns {'MISSING'} | {'CURRENT'} | {'SUSPECT', sinceMs}
--       | {'DROPPED'} | {'CONFIRMED'}
local meta = KEYS[1]
if redis.call('EXISTS', meta) == 0 then return {'MISSING'} end
if verified(meta) then
  stamp_verified(meta)
  return {'CURRENT'}
end
local id = history()
local m = redis.call('HMGET', meta, 'seq', 'suspect', 'stock', 'waves', 'rollover',
  'start_ms', 'end_ms', 'w', 'version', 'sells_until_ms')
if ARGV[2] == '' then
  -- "<history>|<ms>": a stamp restored from a snapshot belongs to an older
  -- history and says nothing about this one.
  local on, since = string.match(m[2] or '', '^(%x+)|(%d+)$')
  if on ~= id or not since then
    since = ARGV[1]
    redis.call('HSET', meta, 'suspect', id .. '|' .. since)
  end
  return {'SUSPECT', since}
end
-- Since when borrows may be missing: the state's last stamp (w, the
-- server's clock, never going back; the snapshot was taken after it), less
-- SKEW_MS, since the waves are judged on the callers' clocks (grab.lua
-- judges a borrow on a clock further behind the stamp at this instant);
-- never before the sale opened (nothing borrows before it). Until
-- the sale's end, not this call's `now`: a caller whose clock runs ahead
-- may have borrowed at an instant still to come on the reconciler's.
local to = sells_until(m[7], m[10])
local from = math.min(to, math.max(tonumber(m[6]), tonumber(m[8] or '0') - SKEW_MS))
-- The schedule judged is the state's own: an operator's change applied
-- after the snapshot (a wave added, stock added without rollover) may have
-- left this shard dry at instants the old schedule sold at, and the users
-- hash would miss the borrows made then. A state behind the durable
-- definition's version is dropped, and rebuilt from it.
-- An open borrow in the state may have finished after the snapshot (its
-- donor minted, its record became a win) without moving this sequence:
-- dropped too, so the rebuild restores the claim from DynamoDB.
-- The outbox stays, unless a later incarnation replaced the state
-- (lib.lua, superseded()): every grant it lists was minted, and its
-- request's record (kept too) replays it once the rebuild has stamped it
-- anew; the pass counts them on their way and the rebuild keeps their
-- units, users and entries. A replaced state's request records are no
-- later state's (lib.lua, own_record()). (A coupon whose every unit is
-- issued is checked against a mark past everything: its outbox goes too,
-- as nothing in it can still be issued.)
if tonumber(m[1]) < tonumber(ARGV[2]) or (tonumber(m[9]) or 0) < (tonumber(ARGV[3]) or 0)
  or ran_dry(tonumber(m[3]), m[4], m[5], from, to)
  or redis.call('ZCARD', KEYS[5]) > 0 then
  if superseded(KEYS[1], ARGV[2]) then redis.call('DEL', KEYS[3]) end
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[4], KEYS[5])
  return {'DROPPED'}
end
stamp_verified(meta, id)
redis.call('HDEL', meta, 'suspect')
return {'CONFIRMED'}
