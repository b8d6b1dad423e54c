-- Writes a shard's fence, the write the WAIT after it (in one pipeline,
-- `RedisLedger::replicated`) waits for a replica to acknowledge, but only
-- if this node holds the decision the caller acts on next. After a failover
-- between the decision and the wait, the promoted replica may not hold it:
-- acknowledging its writes would vouch for a decision it never had (a
-- SUCCESS for a win whose unit, and grant id, the node sells again).
-- KEYS: 1 fence, 2 where the decision is (the request's record, the
--       donor's taken hash, the outbox; the fence again for 'writes'),
--       3 the shard's borrowed hash (for 'pending'), or its meta (for
--       'record', 'exists' and 'lost')
-- ARGV: 1 the fence's ttl (ms), 2 what to check:
--       'record'  KEYS[2] is exactly ARGV[3] (a win's record)
--       'exists'  KEYS[2] exists (a borrow's reservation, or what settled it)
--       'lost'    KEYS[2] is a stored loss (L|...), not a record before it
--       'field'   HGET KEYS[2] ARGV[3] is exactly ARGV[4] (a donor's take)
--       'pending' stream KEYS[2] has entry ARGV[3] carrying grant ARGV[4]
--                 for user ARGV[5] (not an id a rollback minted again for
--                 another), or hash KEYS[3] lists ARGV[4] (a grant re-driven)
--       'writes'  nothing (every write so far)
-- Returns 1 (fenced) | 0 (this node does not hold the decision; no write)
local fence, at = KEYS[1], KEYS[2]
local ttl, what = ARGV[1], ARGV[2]

local held = false
-- A request's record counts only if the shard's state wrote it (lib.lua,
-- own_record()): one a drop left behind, or a snapshot older than a
-- rebuild brought back, is a decision no state holds.
if what == 'record' then
  held = own_record(KEYS[3], redis.call('GET', at)) == ARGV[3]
elseif what == 'exists' then
  held = own_record(KEYS[3], redis.call('GET', at)) ~= nil
elseif what == 'lost' then
  held = string.sub(own_record(KEYS[3], redis.call('GET', at)) or '', 1, 2) == 'L|'
elseif what == 'field' then
  held = redis.call('HGET', at, ARGV[3]) == ARGV[4]
elseif what == 'pending' then
  for _, entry in ipairs(redis.call('XRANGE', at, ARGV[3], ARGV[3])) do
    local fields, grant, user = entry[2], nil, nil
    for i = 1, #fields, 2 do
      if fields[i] == 'grant_id' then grant = fields[i + 1] end
      if fields[i] == 'user_id' then user = fields[i + 1] end
    end
    held = grant == ARGV[4] and user == ARGV[5]
  end
  held = held or redis.call('HEXISTS', KEYS[3], ARGV[4]) == 1
elseif what == 'writes' then
  held = true
end
if not held then return 0 end
redis.call('SET', fence, '1', 'PX', ttl)
return 1
