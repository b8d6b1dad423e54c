-- Takes one unit from a donor shard for a claim reserved on another shard.
-- Idempotent per (user, ordinal): a retried borrow gets the same grant back.
-- KEYS: 1 meta, 2 outbox, 3 taken
-- ARGV: 1 user id, 2 ordinal, 3 request id, 4 now (ms)
-- Returns {'WIN', record} | {'EMPTY'} | {'NOT_FOUND'}
local meta, outbox, taken = KEYS[1], KEYS[2], KEYS[3]
local user, ordinal, request_id, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

local field = ordinal .. ':' .. user
local prior = redis.call('HGET', taken, field)
if prior then return {'WIN', prior} end

local stock = redis.call('HGET', meta, 'stock')
if not stock then return {'NOT_FOUND'} end
if tonumber(stock) <= 0 then return {'EMPTY'} end

local record = issue(meta, outbox, user, ordinal, request_id, now)
redis.call('HSET', taken, field, record)
return {'WIN', record}
