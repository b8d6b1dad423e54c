-- The grab decision on the user's home shard, in one atomic step, run in
-- one of three steps (ARGV[1]):
--   'admit'   decides every refusal the shard can decide (window, level,
--             per-user limit, a certain sell-out, the rate limit) and takes
--             the admission token of the rate limit; reserves nothing.
--             Returns {'ADMITTED'} when the press may go on to the risk
--             reservation. Most presses of a flash sale end here.
--   'commit'  after the risk reservation: the same checks again (the state
--             may have moved meanwhile) except the rate limit, whose token
--             the admission took, then the claim itself.
--   'whole'   both in one call, when there is no risk reservation to make.
--   'draw'    a lottery's winner, claimed by the draw (lib.lua, drawing()):
--             none of a press's checks, the draw's window for the window.
-- KEYS: 1 meta, 2 users, 3 req, 4 outbox, 5 borrowing (an admission passes
--       only the first three: every byte a refusal sends costs Redis CPU)
-- ARGV: 1 step, 2 user id, 3 member level, 4 now (ms), 5 '1' if the press
--       carries a verified device id ('' if not), then for a commit or a
--       whole claim 6 request id, 7 outcome ttl (ms)
-- Returns {kind, detail}:
--   {'REPLAY', record}      the request id was seen: its stored record
--   {'WIN', record}         a unit of this shard's stock was granted
--   {'BORROW', record}      home shard empty, a claim is reserved: try donors
--   {'ADMITTED'}            (admit only) nothing refuses the press here
--   {'NOT_FOUND'} {'OFFLINE'} {'NOT_STARTED', startMs} {'ENDED'}
--   {'NOT_ELIGIBLE', minLevel} {'DEVICE_REQUIRED'} {'ALREADY_CLAIMED'} {'SOLD_OUT'}
--   {'BETWEEN_WAVES', nextWaveAtMs} {'LOTTERY'} (a press on a lottery)
--   {'NOT_LOTTERY'}         (draw) the coupon is not a lottery
--   {'RATE_LIMITED', retryAfterMs}
--   {'UNVERIFIED'}          (commit or whole, or a replayed reservation)
--                           the server restarted since the shard was
--                           verified: BUSY until the reconciler has
--                           checked it (verify.lua)
--   {'UNVERIFIED', record}  a replayed win on such state: true only if
--                           its grant's claim is durable (the caller reads
--                           the claims table), else BUSY as above
-- A refusal at admission (or in a whole claim with no risk places) stores
-- nothing, so a retry after it is decided afresh (as Stripe does for
-- requests that never began executing). A refusal at commit ends a press
-- that began: it holds risk places, which it gives back now, and another
-- copy of it (a retry from a fresh instance, on another clock) may be past
-- its own reservation, holding the same places (HELD). That copy must not
-- win once the places are given back, so the refusal is stored as
-- L|<reply> and every copy ends as this one did (NOT_FOUND excepted: no
-- state, BUSY, nothing decided).
local meta, users, req, outbox, borrowing = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local step, user, level, now = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local device, request_id, ttl = ARGV[5], ARGV[6], ARGV[7]

-- A request seen by this state replays its record (one another state wrote
-- is not this state's: lib.lua, own_record()). A win or a reservation only
-- from state that may sell (verified()): a server restarted from a
-- snapshot holds records of wins whose claims it may be the last to know,
-- and whether its state is the sale's is the reconciler's check to make
-- (verify.lua); a drop then leaves the record to no state. Before the
-- check, a win is handed back with the refusal: its grant's claim, if
-- DynamoDB holds it, makes it true whatever the check decides (a rebuild
-- counts every claim), so the caller may replay it on that read alone.
local prior = own_record(meta, redis.call('GET', req))
if prior then
  local kind = string.sub(prior, 1, 2)
  if kind ~= 'L|' and not verified(meta) then
    if kind == 'W|' then return {'UNVERIFIED', prior} end
    return {'UNVERIFIED'}
  end
  return {'REPLAY', prior}
end

local function refuse(reply)
  local base = step == 'commit' and reply[1] ~= 'NOT_FOUND' and incarnation(meta)
  if base then record_request(req, 'L|' .. table.concat(reply, '|'), base, ttl) end
  return reply
end

-- Every refusal the shard decides (lib.lua); the admission takes the rate
-- limit's token, so a commit does not take a second one.
local refused, m, claimed, stock, _, gone
if step == 'draw' then
  refused, m, claimed, stock, _, gone = drawing(meta, users, user, now)
else
  refused, m, claimed, stock, _, gone = refusal(meta, users, user, level, now,
    step == 'commit' and 'skip' or 'take', device)
end
if refused then return refuse(refused) end
if step == 'admit' then return {'ADMITTED'} end
-- A claim writes what sells (a unit, or a reservation that borrows one):
-- never on state a restart may have rolled back (lib.lua, verified()).
if not verified(meta) then return {'UNVERIFIED'} end

-- A borrow moves none of this shard's sequence, only its users hash, so a
-- restart from a snapshot taken before it is caught only by verify.lua
-- finding the shard dry at some instant since its state's last stamp (w,
-- which only grows) less SKEW_MS. A caller whose clock lags that far behind
-- the stamp would borrow at an instant before the check's window (a wave
-- not yet out on its clock, out on the check's): its press is judged at
-- the window's first instant instead, where the shard either has a unit
-- for it or is dry for the check to see. Only this path reads the stamp.
if stock <= 0 then
  local floor = tonumber(redis.call('HGET', meta, 'w') or '0') - SKEW_MS
  if floor > now then
    if floor >= tonumber(m[3]) then return refuse({'ENDED'}) end
    stock, _, _, gone = sellable(tonumber(m[10]), m[14], m[15], floor)
  end
end
expire(meta, gone)
local base = m[18] or '0'
local ordinal = claimed + 1
redis.call('HINCRBY', users, user, 1)
local record = issue(meta, outbox, stock, user, ordinal, request_id, now)
if record then
  record_request(req, record, base, ttl)
  return {'WIN', record}
end
record = 'B|' .. ordinal .. '|' .. m[13] .. '|' .. now
record_request(req, record, base, math.max(tonumber(ttl), RESERVATION_TTL_MS))
-- Listed until settled, so the reconciler can finish borrows whose caller died.
redis.call('ZADD', borrowing, now, request_id .. ':' .. user)
return {'BORROW', record}
