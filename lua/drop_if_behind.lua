-- Drops a stock shard whose grant sequence is behind the durable high-water
-- mark: Redis rolled back (restarted from an older snapshot, a failover to a
-- replica that had not acknowledged) to before grants that were issued, and
-- would sell their units a second time. The reconciler's rebuild then
-- restores the shard from DynamoDB, with a sequence far above any minted.
--
-- Atomic compare-and-drop: a shard rebuilt meanwhile (its sequence restarts
-- at the rebuild's time in ms) or one that has caught up is left alone, and
-- so is one whose server restarted since it was stamped (lib.lua,
-- verified()): verify.lua judges it, once the send window is over.
--
-- KEYS[1] T:meta  KEYS[2] T:users  KEYS[3] T:outbox (kept, but a replaced state's)  KEYS[4] T:taken
-- KEYS[5] T:borrowing (one hash tag T)
-- ARGV[1] the shard's durable high-water mark
-- Returns 1 if the shard was dropped, 0 if not.
local FORCED = '18446744073709551615'
local seq = redis.call('HGET', KEYS[1], 'seq')
if not seq then
  return 0
end
if tonumber(seq) >= tonumber(ARGV[1]) or not verified(KEYS[1]) then
  return 0
end
-- The outbox stays (verify.lua says why), unless a later incarnation
-- replaced the state (lib.lua, superseded()). A forced drop (the mark
-- u64::MAX: the shard minted an id claimed for another grant, a rollback
-- within its incarnation) keeps it: the pass trims the entries minted again.
if ARGV[1] ~= FORCED and superseded(KEYS[1], ARGV[1]) then redis.call('DEL', KEYS[3]) end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[4], KEYS[5])
return 1
