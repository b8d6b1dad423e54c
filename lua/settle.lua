-- Finishes a borrow on the home shard: stores the donor's grant under the
-- request id, or, when no donor had stock, tries the home shard once more (at
-- the instant the claim was reserved, as the donors were) and
-- otherwise releases the reserved claim and answers sold out (or, with a
-- wave still to come, between waves). When the coupon
-- is no longer on sale (a donor said so, or the home shard does), nothing is
-- taken: the claim is released and the request answers OFFLINE or ENDED.
-- A donor's grant stored here is also listed in `borrowed` (grant id ->
-- the grant), until the reconciler finds it issued: the unit is on the
-- donor, the claim here, and if the donor loses its state the list is what
-- tells its rebuild that the unit is gone (and which grant carries it).
-- KEYS: 1 meta, 2 users, 3 req, 4 outbox, 5 borrowing, 6 borrowed
-- ARGV: 1 user id, 2 request id, 3 now (ms), 4 outcome ttl (ms),
--       5 the donor's W-record, or '' when every donor was empty or closed,
--       6 'OFFLINE' or 'ENDED' when a donor found the coupon closed, else ''
-- Returns {'DONE', record} | {'GONE'} (the reservation is no longer there)
--       | {'MISSING'} (the home shard has no state: lost or dropped, and not
--         rebuilt yet; or its server restarted and the reconciler has not
--         verified it yet: nothing is changed, the borrow stays open)
local meta, users, req, outbox, borrowing, borrowed = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local user, request_id, now, ttl, donor, closed = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]

-- Lists the donor's grant (its W-record) as this user's claim.
local function list_borrowed()
  local grant_id, ordinal, shard, at = string.match(donor, '^W|([^|]+)|(%d+)|(%d+)|(%d+)$')
  redis.call('HSET', borrowed, grant_id, cjson.encode({
    grant_id = grant_id, coupon_id = redis.call('HGET', meta, 'coupon_id'), user_id = user,
    ordinal = tonumber(ordinal), request_id = request_id,
    shard = tonumber(shard), granted_at_ms = tonumber(at)}))
end

-- A request record can outlive its shard (a shard dropped after rolling
-- back keeps its request keys): settling there would count against, or
-- stamp, state that is about to be rebuilt. Wait for the rebuild.
if redis.call('EXISTS', meta) == 0 then return {'MISSING'} end
-- Nor on state a restart may have rolled back, until it is verified.
if not verified(meta) then return {'MISSING'} end

local base = incarnation(meta)
local listed = redis.call('ZREM', borrowing, request_id .. ':' .. user)
local current = own_record(meta, redis.call('GET', req))
if not current then
  -- The reservation's record is gone, or another state's (lib.lua,
  -- own_record(): this state was rebuilt since, and counts the claim only
  -- if the rebuild saw the donor's grant), or it expired while the borrow
  -- stayed open (its caller died, and no pass settled it within
  -- RESERVATION_TTL_MS). An expired one's claim was
  -- counted at reservation: with no donor grant, give it back, once (only
  -- the call that took the listing off), so the user is not ALREADY_CLAIMED
  -- while holding nothing.
  if listed == 1 and donor == '' then
    if redis.call('HINCRBY', users, user, -1) <= 0 then
      redis.call('HDEL', users, user)
    end
  end
  -- A donor's grant is the user's, and the request's: it is recorded under
  -- the request id and listed here, so a retry replays it (decided afresh,
  -- the retry would claim another ordinal, and the grant its request never
  -- heard of would reach the user all the same: explorer seed 1102). The
  -- count made at reservation stays; a reservation this shard lost with
  -- its state (rebuilt since, by a pass that did not see the donor's grant
  -- yet) is counted now (an expired one's count is then one too many: the
  -- safe side).
  if donor ~= '' then
    if listed == 0 then redis.call('HINCRBY', users, user, 1) end
    record_request(req, donor, base, ttl)
    list_borrowed()
  end
  return {'GONE'}
end
if string.sub(current, 1, 2) ~= 'B|' then return {'DONE', current} end

local ordinal, epoch, reserved_at = string.match(current, '^B|(%d+)|(%d+)|(%d+)')
if donor ~= '' then
  record_request(req, donor, base, ttl)
  list_borrowed()
  return {'DONE', donor}
end

-- The home is tried once more at the instant the claim was reserved, as
-- every donor was (take.lua): whichever copy of the press, retry or
-- reconciler pass settles, and whenever, the press is decided as of that
-- instant. A copy told BETWEEN_WAVES whose reservation a failover brought
-- back would otherwise be settled by the reconciler after the wave with
-- the home's new unit: a coupon from a press told it had none.
local at = tonumber(reserved_at)
local m = redis.call('HMGET', meta, 'stock', 'epoch', 'status', 'end_ms', 'waves', 'rollover', 'sells_until_ms')
if closed == '' and m[3] and m[3] ~= 'ONLINE' then closed = 'OFFLINE' end
if closed == '' and m[4] and at >= sells_until(m[4], m[7]) then closed = 'ENDED' end
if closed ~= '' then
  if redis.call('HINCRBY', users, user, -1) <= 0 then
    redis.call('HDEL', users, user)
  end
  record_request(req, 'L|' .. closed, base, ttl)
  return {'DONE', 'L|' .. closed}
end
local avail, next_at, _, gone = sellable(tonumber(m[1]), m[5], m[6], at)
expire(meta, gone)
local record = issue(meta, outbox, avail, user, ordinal, request_id, reserved_at)
if record then
  record_request(req, record, base, ttl)
  return {'DONE', record}
end

if redis.call('HINCRBY', users, user, -1) <= 0 then
  redis.call('HDEL', users, user)
end
-- Every shard was seen empty and nothing was added (no stock, no wave)
-- since the reservation: remember it so the next grab on this shard answers
-- at once, until the epoch moves or the next wave is out.
local _, _, out_then = schedule(m[5], at)
local _, _, out = schedule(m[5], tonumber(now))
if m[2] == epoch and out_then == out then
  redis.call('HSET', meta, 'soldout', stamp(epoch, m[5], out))
end
-- Nothing now, but a wave to come: the press hears when. Kept as long as
-- any refusal of a press that began (grab.lua's `refuse`), not only until
-- the wave: the copy that hears it gives the press's risk places back, and
-- another copy of the press (a retry on another instance, after the wave)
-- would otherwise be decided afresh, win, and keep no place in the user's
-- daily count (explorer seed 1002). The retry hears BETWEEN_WAVES with an
-- instant now past, and a new press (a new request id) is decided afresh.
if next_at then
  local lost = 'L|BETWEEN_WAVES|' .. next_at
  record_request(req, lost, base, ttl)
  return {'DONE', lost}
end
record_request(req, 'L|SOLD_OUT', base, ttl)
return {'DONE', 'L|SOLD_OUT'}
