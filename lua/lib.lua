-- Shared prelude, compiled in front of grab.lua, peek.lua, standing.lua, take.lua,
-- settle.lua, preheat.lua, verify.lua and drop_if_behind.lua (the lua! macro of
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
-- and returns its W-record; or nil, taking nothing, when `stock` (the
-- shard's stock as the caller read it in this same script) is not
-- positive. The one place a shard's stock goes down, and so the one place
-- that keeps it from going below zero.
local function issue(meta, outbox, stock, user, ordinal, request_id, now)
  if not stock or stock <= 0 then return nil end
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

-- The server's clock in ms.
local function clock_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- True if this shard's state may sell: it was written or verified on this
-- server's replication history (meta field run), or this server is a
-- replica of that history, promoted, whose acknowledged writes (WAIT) it
-- holds; the stamp then moves to the new history. False after a restart,
-- from a snapshot or an AOF alike: the state may lack writes users were
-- told about (a snapshot older than the last grants), so it waits for the
-- reconciler to check it against DynamoDB (verify.lua).
--
-- A primary that restarts from its own RDB names its old history as its
-- second id too (the file carries it, for its replicas' partial resync),
-- just as a promoted replica does. What tells them apart is the process's
-- age: a replica was running when the shard's state was last stamped
-- (field w: the preheat, each reconciler pass), and received that stamp by
-- replication; a server that loaded a file started after everything in
-- it. Two seconds of margin for the clocks of two nodes.
--
-- Costs an INFO (a few microseconds), so only the paths that grant call it.
local function verified(meta)
  local m = redis.call('HMGET', meta, 'run', 'w')
  if not m[1] then return false end
  local id, previous = history()
  if m[1] == id then return true end
  if m[1] ~= previous then return false end
  local now = clock_ms()
  local up = tonumber(string.match(redis.call('INFO', 'server'), 'uptime_in_seconds:(%d+)'))
  if not up or now - up * 1000 + 2000 > tonumber(m[2] or '0') then return false end
  redis.call('HSET', meta, 'run', id, 'w', now)
  return true
end

-- The refusals a press's home shard decides, in the order a press hears
-- them: the one copy of them, for grab.lua's admission and commit and for
-- peek.lua's dry run. `bucket` says what the rate limit does: 'take' takes
-- the press's token (an admission, a whole claim), 'skip' passes it (a
-- commit: its admission took the token), 'look' only looks (a dry run
-- changes nothing). Returns the refusal ({kind, detail}), or nil with the
-- shard's meta fields as read and the claims the user holds here.
local function refusal(meta, users, user, level, now, bucket)
  local m = redis.call('HMGET', meta, 'status', 'start_ms', 'end_ms',
    'min_level', 'per_user_limit', 'rate', 'burst', 'tokens', 'bucket_ms',
    'stock', 'shards', 'soldout', 'epoch')
  if not m[1] then return {'NOT_FOUND'} end
  if m[1] ~= 'ONLINE' then return {'OFFLINE'} end
  if now < tonumber(m[2]) then return {'NOT_STARTED', m[2]} end
  if now >= tonumber(m[3]) then return {'ENDED'} end
  if level < tonumber(m[4]) then return {'NOT_ELIGIBLE', m[4]} end
  -- Sold out for certain: one shard only, or a full scan of every shard
  -- found nothing since the last stock increase (soldout is stamped with
  -- the epoch that any increase bumps). Before the per-user count, as the
  -- instances' sold-out memory answers too: after a sell-out a holder
  -- pressing again hears SOLD_OUT, and the press costs no read of the
  -- users hash.
  if tonumber(m[10]) <= 0 and (tonumber(m[11]) <= 1 or m[12] == m[13]) then
    return {'SOLD_OUT'}
  end
  local claimed = tonumber(redis.call('HGET', users, user) or '0')
  if claimed >= tonumber(m[5]) then return {'ALREADY_CLAIMED'} end
  -- Per-shard token bucket; a rate of 0 turns it off.
  local rate = tonumber(m[6])
  if rate > 0 and bucket ~= 'skip' then
    local burst = tonumber(m[7])
    local tokens = tonumber(m[8]) or burst
    local last = tonumber(m[9]) or now
    if now > last then
      tokens = math.min(burst, tokens + (now - last) * rate / 1000)
      last = now
    end
    if tokens < 1 then
      return {'RATE_LIMITED', tostring(math.ceil((1 - tokens) * 1000 / rate))}
    end
    if bucket == 'take' then
      redis.call('HSET', meta, 'tokens', tostring(tokens - 1), 'bucket_ms', last)
    end
  end
  return nil, m, claimed
end
