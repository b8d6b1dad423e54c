-- The caller's standing on one coupon, for the coupon center's listing:
-- what the grab's admission on the user's home shard would refuse a press
-- with (lib.lua, refusal(), with the rate limit passed: a listing draws the
-- button, not whether this second's tokens are gone), and the claims the
-- user holds here, where all of theirs are counted. A read-only script (no
-- write command), so it may also run on a replica.
-- KEYS: 1 meta, 2 users
-- ARGV: 1 user id, 2 member level, 3 now (ms), 4 '1' if the caller carries
--       a verified device id
-- Returns {held, <answer>...}: the answer is a refusal as grab.lua's
-- ({'NOT_STARTED', startMs}, {'SOLD_OUT'}, ...) or, as peek.lua's, OPEN
-- (this shard has stock) or EMPTY (a press would borrow).
local refused, _, claimed, avail, next_at = refusal(KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), 'skip', ARGV[4])
local held = tostring(claimed or tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0'))
if refused then return {held, refused[1], refused[2]} end
if avail > 0 then return {held, 'OPEN'} end
return {held, 'EMPTY', next_at}
