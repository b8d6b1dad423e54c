-- Writes one shard's definition and stock, once. Re-running with the same
-- definition is a no-op; a different definition under the same id is refused,
-- so a preheat can never reset the stock of a running sale.
-- KEYS: 1 meta
-- ARGV: 1 fingerprint of the definition, 2.. field/value pairs
-- Returns 'CREATED' | 'EXISTS' | 'CONFLICT'
local meta = KEYS[1]
local existing = redis.call('HGET', meta, 'fingerprint')
if existing then
  if existing == ARGV[1] then return 'EXISTS' end
  return 'CONFLICT'
end
-- Stamped with the replication history it is written on, and when
-- (lib.lua, verified()).
redis.call('HSET', meta, 'fingerprint', ARGV[1], 'run', (history()), 'w', clock_ms(), unpack(ARGV, 2))
return 'CREATED'
