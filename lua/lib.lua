-- Shared prelude, compiled in front of grab.lua, peek.lua, recorded.lua, standing.lua,
-- available.lua, take.lua, settle.lua, preheat.lua, verify.lua, fence.lua,
-- apply_settings.lua, restore_hash.lua and drop_if_behind.lua (the lua! macro of
-- shared/adapters/src/redis/scripts.rs). Each script runs
-- on ONE stock shard: every key it touches is passed in KEYS and carries the
-- shard's hash tag {cpn:<coupon>:<shard>}, so it is valid on Redis Cluster.
--
-- Shard layout (hash tag T = {cpn:<coupon>:<shard>}):
--   T:meta    hash   definition copy, stock, token bucket, seq, epoch, soldout,
--                    run (the replication history the shard was verified on),
--                    base (the state's incarnation: incarnation())
--   T:users   hash   user id -> number of claims whose home is this shard
--   T:req:<user>:<requestId>  string  the stored outcome of one request (a win's is
--                                     restored by restore_requests.lua after a loss)
--   T:outbox  stream one entry per grant made from this shard's stock
--   T:taken   hash   "<ordinal>:<user>" -> grant record, for borrows (dedup)
--   T:borrowing zset "<requestId>:<user>" -> reserved at (ms), open borrows
--   T:borrowed hash  grant id -> the grant (JSON), donors' grants settled here,
--                    until the reconciler finds them issued
--   T:base    string the highest incarnation a rebuild staged records under
--                    (restore_requests.lua, preheat.lua)
--
-- Records stored under a request id (never contain the user id), each
-- stamped '#<base>' with the incarnation of the shard's state that wrote it
-- (own_record(); the stamp is stripped from every reply):
--   W|<grantId>|<ordinal>|<shard>|<grantedAtMs>   a win
--   B|<ordinal>|<epoch>|<reservedAtMs>            a reservation waiting on a borrow
--   L|SOLD_OUT                                    a borrow that found nothing
--   L|OFFLINE, L|ENDED, L|BETWEEN_WAVES|<ms>      a borrow the coupon closed on
--   L|<refusal>                                   a commit refused (grab.lua):
--                                                 the reply, fields joined by |

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

-- The incarnation of a shard's state (meta base): the grant sequence it
-- started at, 0 for a preheated shard, above every sequence any earlier
-- state minted for a rebuilt one (domain reconcile/rebuild.rs). nil when
-- the shard has no state.
local function incarnation(meta)
  local m = redis.call('HMGET', meta, 'seq', 'base')
  if not m[1] then return nil end
  return m[2] or '0'
end

-- Stores a request's record, stamped with the incarnation that decides it.
local function record_request(req, record, base, ttl)
  redis.call('SET', req, record .. '#' .. base, 'PX', ttl)
end

-- A stored record and the incarnation it was stamped with ('0' for one
-- stored before records were stamped).
local function unstamp(stored)
  local record, base = string.match(stored, '^(.*)#(%d+)$')
  if record then return record, base end
  return stored, '0'
end

-- The request's record if this shard's state wrote it (stamped with its
-- incarnation), or if it is a loss, else nil; `stored` is the request key's value as read (nil
-- if none: the incarnation is read only for a record). Records outlive the
-- state that wrote them: a drop or a loss takes the shard's state and
-- leaves its requests' keys, and a server restarted from a snapshot older
-- than a rebuild brings back the records of a state the rebuild replaced.
-- Such a record says nothing true of this state: its win was never
-- counted here (the rebuild restores, stamped anew, every win DynamoDB
-- names; one it does not name was never sent, its unit sold again), its
-- reservation is not in the users hash. The press is decided afresh.
local function own_record(meta, stored)
  if not stored then return nil end
  local record, stamp = unstamp(stored)
  -- A loss holds no unit and counts nothing: whichever state told it, every
  -- copy and retry of the press hears it (grab.lua's `refuse`), and a
  -- rebuild writes a win DynamoDB names over it.
  if string.sub(record, 1, 2) == 'L|' then return record end
  local base = incarnation(meta)
  if not base or stamp ~= base then return nil end
  return record
end

-- True if a later incarnation has replaced this shard's state (it came
-- back from a snapshot older than a rebuild): `mark` (the durable mark) is
-- past every sequence the state can have minted, its base plus its total
-- stock, and only a rebuild's base gets there (domain
-- reconcile/rebuild.rs). A drop of such a state deletes its outbox: its
-- grants that were ever sent were claimed first, and the rebuild that
-- replaced it counted them from there; the others were never sent, their
-- units sold again. A drop of a current state keeps it: its grants were
-- minted in the sale's latest incarnation and a borrow's home may still
-- record one, so the pass counts them on their way and the rebuild keeps
-- them.
local function superseded(meta, mark)
  local m = redis.call('HMGET', meta, 'base', 'total', 'restored_at_ms')
  -- A state rebuilt before incarnations were kept has none to compare:
  -- its outbox is kept, as any drop kept it then.
  if not m[1] and m[3] then return false end
  return tonumber(mark) > tonumber(m[1] or '0') + tonumber(m[2] or '0')
end

-- The replication history this server's data belongs to: its replication
-- id, and the id it took over from when it was promoted (zeros if never).
-- A restart (from a snapshot, or from nothing) starts a new history; a
-- replica shares its primary's, and a promoted replica names the old one as
-- its second id. A server that does not tell its history (ElastiCache
-- Serverless documents INFO but not its fields; a proxy in front of the
-- nodes answers it) has one history, 'untold', for good: its restarts are
-- not seen here, and what a failover of it rolls back is caught by the
-- grant claims in DynamoDB instead (a minted id or a user's ordinal
-- claimed for another grant drops the shard; CACHE_DURABILITY=none).
local function history()
  local info = redis.call('INFO', 'replication')
  local id = string.match(info, 'master_replid:(%x+)')
  if not id then return 'untold', nil end
  return id, string.match(info, 'master_replid2:(%x+)')
end

-- The margin verify.lua's window starts with before a shard's last stamp
-- (w), for the callers' clocks the waves are judged on: a press that would
-- borrow on a clock further behind the stamp is judged at the stamp less
-- this instead (grab.lua).
local SKEW_MS = 2000

-- How long a reservation's record (B|...) lives at the least: until its
-- borrow is settled (by its caller, a retry, or the reconciler's next pass,
-- which settles a borrow whose caller died within a minute or so), never
-- until the outcome TTL alone. A reservation whose record expired while its
-- borrow stayed open kept the user's claim counted with nothing saying
-- why: a retry of the press was decided afresh, heard ALREADY_CLAIMED or
-- won the next ordinal, and the borrow's unit, re-driven, reached the user
-- from the request that had heard otherwise (the explorer's seeds 1102,
-- 6046, with IDEMPOTENCY_TTL_SECS at 60 s a minute's reconciler outage
-- away). 30 days: the longest outcome TTL the configuration allows; a
-- record outlives its borrow only where a drop took the listing, until a
-- retry resumes it.
local RESERVATION_TTL_MS = 30 * 86400000

-- The server's clock in ms.
local function clock_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Stamps the shard's state as verified on history `id` now: w never goes
-- back (a promoted replica's clock, or one stepped back, may be behind the
-- stamp it inherited), so a window that starts from a snapshot's w starts
-- no later than any borrow judged since (grab.lua).
local function stamp_verified(meta, id)
  local w = math.max(clock_ms(), tonumber(redis.call('HGET', meta, 'w') or '0'))
  if id then
    redis.call('HSET', meta, 'run', id, 'w', w)
  else
    redis.call('HSET', meta, 'w', w)
  end
  return w
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
  stamp_verified(meta, id)
  return true
end

-- The shard's release schedule at `now` (meta field waves:
-- "<atMs>:<units released by then>,..." in time order, the units
-- cumulative and this shard's share; '' or absent without waves): the
-- units it still holds back for later waves, the first wave after now
-- (its instant as written, or nil), how many waves are out, and the share
-- of the last one out. A unit is released by the clock alone: nothing has
-- to run at a wave's instant.
local function schedule(waves, now)
  if not waves or waves == '' then return 0, nil, 0, 0 end
  local released, before, final, next_at, out = 0, 0, 0, nil, 0
  for at, cum in string.gmatch(waves, '(%d+):(%d+)') do
    final = tonumber(cum)
    if tonumber(at) <= now then
      before, released, out = released, final, out + 1
    elseif not next_at then
      next_at = at
    end
  end
  return final - released, next_at, out, released - before
end

-- What a shard may sell at `now` out of `stock`: what its waves released
-- (all of it without waves). With rollover off (meta rollover '0') only
-- the last wave's share may sell: what earlier waves left unclaimed
-- expires once a later one is out, so a shard holding more than that share
-- has leftovers to write off (the `gone` units; the script that sells
-- writes them off with expire(), the read-only ones only subtract them).
-- A sale within the wave only lowers what is left, so once written off
-- nothing more expires until the next wave. Returns the units it may sell,
-- the next wave's instant (or nil), how many waves are out and `gone`.
local function sellable(stock, waves, rollover, now)
  local held_back, next_at, out, share = schedule(waves, now)
  local avail = stock - held_back
  local gone = 0
  if rollover == '0' and out > 0 and avail > share then gone = avail - share end
  return avail - gone, next_at, out, gone
end

-- True if the shard's sellable units (sellable(), out of `stock`) were
-- none at some instant of [from, to]: a press homed on it then borrowed
-- from the other shards, which moves none of its own fields but its users
-- hash and the request's record. Between waves the instants are where the
-- schedule steps (a wave's instant), so those and `from` are all it looks
-- at. Without waves: stock <= 0.
local function ran_dry(stock, waves, rollover, from, to)
  if sellable(stock, waves, rollover, from) <= 0 then return true end
  for at in string.gmatch(waves or '', '(%d+):%d+') do
    local t = tonumber(at)
    if t > from and t <= to and sellable(stock, waves, rollover, t) <= 0 then return true end
  end
  return false
end

-- Writes off a wave's leftovers (sellable()'s `gone`), counted in meta
-- expired so the reconciler's equation still adds up.
local function expire(meta, gone)
  if gone > 0 then
    redis.call('HINCRBY', meta, 'stock', -gone)
    redis.call('HINCRBY', meta, 'expired', gone)
  end
end

-- What a sold-out stamp says it was made at: the epoch, and with waves the
-- number of waves out, so a stamp made between two waves dies when the
-- next one is released (no write needed at its instant).
local function stamp(epoch, waves, out)
  if not waves or waves == '' then return epoch end
  return epoch .. ':' .. out
end

-- The refusals a press's home shard decides, in the order a press hears
-- them: the one copy of them, for grab.lua's admission and commit and for
-- peek.lua's dry run. `device` is '1' when the press carries a verified
-- device id: a coupon that requires one (meta device '1') refuses a press
-- without, as the risk rule DEVICE_REQUIRED, before anything is reserved.
-- `bucket` says what the rate limit does: 'take' takes
-- the press's token (an admission, a whole claim), 'skip' passes it (a
-- commit: its admission took the token), 'look' only looks (a dry run
-- changes nothing). Returns the refusal ({kind, detail}), or nil with the
-- shard's meta fields as read, the claims the user holds here, the units it
-- may sell now (its stock less what later waves hold back) and the next
-- wave's instant (nil without one), and the leftovers of earlier waves a
-- script that sells writes off first (sellable(), expire()).
local function refusal(meta, users, user, level, now, bucket, device)
  local m = redis.call('HMGET', meta, 'status', 'start_ms', 'end_ms',
    'min_level', 'per_user_limit', 'rate', 'burst', 'tokens', 'bucket_ms',
    'stock', 'shards', 'soldout', 'epoch', 'waves', 'rollover', 'device', 'mode', 'base')
  if not m[1] then return {'NOT_FOUND'} end
  if m[1] ~= 'ONLINE' then return {'OFFLINE'} end
  -- A lottery's units go to its draw's winners only (drawing()).
  if m[17] == 'LOTTERY' then return {'LOTTERY'} end
  if now < tonumber(m[2]) then return {'NOT_STARTED', m[2]} end
  if now >= tonumber(m[3]) then return {'ENDED'} end
  if level < tonumber(m[4]) then return {'NOT_ELIGIBLE', m[4]} end
  if m[16] == '1' and device ~= '1' then return {'DEVICE_REQUIRED'} end
  -- Sold out for certain: one shard only, or a full scan of every shard
  -- found nothing since the last stock increase (soldout is stamped with
  -- the epoch that any increase bumps) or the last wave. Before the per-user count, as the
  -- instances' sold-out memory answers too: after a sell-out a holder
  -- pressing again hears SOLD_OUT, and the press costs no read of the
  -- users hash.
  -- Between waves, "nothing now" is not "nothing ever": BETWEEN_WAVES with
  -- the next wave's instant.
  local avail, next_at, out, gone = sellable(tonumber(m[10]), m[14], m[15], now)
  if avail <= 0 and (tonumber(m[11]) <= 1 or m[12] == stamp(m[13], m[14], out)) then
    if next_at then return {'BETWEEN_WAVES', next_at} end
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
  return nil, m, claimed, avail, next_at, gone
end

-- The draw's claim of a lottery's winner (grab.lua, step 'draw'): in the
-- shape refusal() answers, with the draw's window for the window (meta
-- sells_until_ms in place of end_ms: m[3]) and none of a press's checks
-- (the registration checked the level, the device and the risk rules; the
-- draw chose the user). Refuses a coupon that is not a lottery.
local function drawing(meta, users, user, now)
  local m = redis.call('HMGET', meta, 'status', 'start_ms', 'sells_until_ms',
    'min_level', 'per_user_limit', 'rate', 'burst', 'tokens', 'bucket_ms',
    'stock', 'shards', 'soldout', 'epoch', 'waves', 'rollover', 'device', 'mode', 'base')
  if not m[1] then return {'NOT_FOUND'} end
  if m[1] ~= 'ONLINE' then return {'OFFLINE'} end
  if m[17] ~= 'LOTTERY' or not m[3] then return {'NOT_LOTTERY'} end
  if now >= tonumber(m[3]) then return {'ENDED'} end
  local claimed = tonumber(redis.call('HGET', users, user) or '0')
  if claimed >= tonumber(m[5]) then return {'ALREADY_CLAIMED'} end
  return nil, m, claimed, tonumber(m[10]), nil, 0
end

-- Until when a shard's units may be claimed: the grab window's end, or a
-- lottery's draw window's (meta sells_until_ms; absent on shards preheated
-- before lotteries, where it is the window's end).
local function sells_until(end_ms, sells_until_ms)
  return tonumber(sells_until_ms or end_ms)
end

