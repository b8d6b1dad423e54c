-- Shared prelude, compiled in front of grab.lua, take.lua and settle.lua
-- (concat! of include_str! in shared/src/adapters/redis.rs). Each script runs
-- on ONE stock shard: every key it touches is passed in KEYS and carries the
-- shard's hash tag {cpn:<coupon>:<shard>}, so it is valid on Redis Cluster.
--
-- Shard layout (hash tag T = {cpn:<coupon>:<shard>}):
--   T:meta    hash   definition copy, stock, token bucket, seq, epoch, soldout
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
