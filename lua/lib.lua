-- Shared prelude, compiled in front of grab.lua, take.lua, settle.lua,
-- preheat.lua and verify.lua (the lua! macro of
-- shared/adapters/src/redis/scripts.rs). Each script runs
-- on ONE stock shard: every key it touches is passed in KEYS and carries the
-- shard's hash tag {cpn:<coupon>:<shard>}, so it is valid on Redis Cluster.
--
-- Shard layout (hash tag T = {cpn:<coupon>:<shard>}):
--   T:meta    hash   definition copy, stock, token bucket, seq, epoch, soldout,
--                    run (the replication history the shard was verified on)
--   T:users   hash   user id -> number of claims whose home is this shard
--   T:req:<user>:<requestId>  string  the stored outcome of one request (a win's is
--                                     restored by restore_requests.lua after a loss)
--   T:outbox  stream one entry per grant made from this shard's stock
--   T:taken   hash   "<ordinal>:<user>" -> grant record, for borrows (dedup)
--   T:borrowing zset "<requestId>:<user>" -> reserved at (ms), open borrows
--
-- Records stored under a request id (never contain the user id):
--   W|<grantId>|<ordinal>|<shard>|<grantedAtMs>   a win
--   B|<ordinal>|<epoch>|<reservedAtMs>            a reservation waiting on a borrow
--   L|SOLD_OUT                                    a borrow that found nothing
--   L|OFFLINE, L|ENDED                            a borrow the coupon closed on

-- Takes one unit of this shard's stock for (user, ordinal): bumps the shard's
-- grant sequence, appends the grant to the outbox under the stream id
-- <seq>-0 (so a grant id <coupon>-<shard>-<seq> is found with one XRANGE),
-- and returns its W-record. The caller has checked that stock > 0.
local function issue(meta, outbox, user, ordinal, request_id, now)
  redis.call('HINCRBY', meta, 'stock', -1)
  local seq = redis.call('HINCRBY', meta, 'seq', 1)
  local ids = redis.call('HMGET', meta, 'coupon_id', 'shard')
  local grant_id = ids[1] .. '-' .. ids[2] .. '-' .. seq
  redis.call('XADD', outbox, seq .. '-0',
    'grant_id', grant_id, 'coupon_id', ids[1], 'user_id', user,
    'ordinal', ordinal, 'request_id', request_id, 'shard', ids[2],
    'granted_at_ms', now)
  return 'W|' .. grant_id .. '|' .. ordinal .. '|' .. ids[2] .. '|' .. now
end

-- The replication history this server's data belongs to: its replication
-- id, and the id it took over from when it was promoted (zeros if never).
-- A restart (from a snapshot, or from nothing) starts a new history; a
-- replica shares its primary's, and a promoted replica names the old one as
-- its second id.
local function history()
  local info = redis.call('INFO', 'replication')
  return string.match(info, 'master_replid:(%x+)'), string.match(info, 'master_replid2:(%x+)')
end

-- True if this shard's state may sell: it was written or verified on this
-- server's replication history (meta field run), or on the primary this
-- server was promoted from, whose acknowledged writes (WAIT) a promoted
-- replica holds; the stamp then moves to the new history. False after a
-- restart, from a snapshot or an AOF alike: the state may lack writes
-- users were told about (a snapshot older than the last grants), so it
-- waits for the reconciler to check it against DynamoDB (verify.lua). Costs
-- an INFO (a few microseconds), so only the paths that grant call it.
local function verified(meta)
  local run = redis.call('HGET', meta, 'run')
  if not run then return false end
  local id, previous = history()
  if run == id then return true end
  if run == previous then
    redis.call('HSET', meta, 'run', id)
    return true
  end
  return false
end
