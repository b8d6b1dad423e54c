-- Writes one shard's definition and stock, once. Re-running with the same
-- definition is a no-op; a different definition under the same id is refused,
-- so a preheat can never reset the stock of a running sale.
-- A rebuild's meta (its field base, the state's incarnation) opens the
-- shard only if no rebuild with a higher one staged its records there
-- (KEYS[2], restore_requests.lua): of two rebuilds at once, the lower
-- would open a state whose records the higher stamped, and it answers
-- EXISTS, as if the other had opened first.
-- KEYS: 1 meta, 2 the staged base (T:base)
-- ARGV: 1 fingerprint of the definition, 2.. field/value pairs
-- Returns 'CREATED' | 'EXISTS' | 'CONFLICT'
local meta = KEYS[1]
local existing = redis.call('HGET', meta, 'fingerprint')
if existing then
  if existing == ARGV[1] then return 'EXISTS' end
  return 'CONFLICT'
end
local staged = tonumber(redis.call('GET', KEYS[2]) or '-1')
for i = 2, #ARGV, 2 do
  if ARGV[i] == 'base' and tonumber(ARGV[i + 1]) < staged then return 'EXISTS' end
end
-- Stamped with the replication history it is written on, and when
-- (lib.lua, verified()).
redis.call('HSET', meta, 'fingerprint', ARGV[1], 'run', (history()), 'w', clock_ms(), unpack(ARGV, 2))
return 'CREATED'
