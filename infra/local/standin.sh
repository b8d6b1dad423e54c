# Sourced by infra/local/start.sh: the arguments that make a valkey-server
# stand in for ElastiCache Serverless (REDIS_ENGINE=valkey-serverless), as
# its "supported and restricted commands" and "configuration and limits"
# pages describe it: cluster mode, `maxmemory-policy volatile-lru`, a 5 s
# script time limit, and every command a client of Serverless cannot send
# (and the functions must never need) renamed away. CLIENT and SCRIPT stay:
# Serverless keeps some of their subcommands (CLIENT SETNAME, SCRIPT LOAD),
# and a rename takes a whole command. Serverless refuses a script that
# declares no keys, which no server here can be told to do: a unit test
# holds every script to its KEYS (shared/adapters/src/redis/scripts.rs).
SERVERLESS_LACKS=(WAIT WAITAOF CONFIG KEYS DEBUG MONITOR SWAPDB MOVE LASTSAVE LATENCY MEMORY OBJECT
  SLOWLOG SAVE BGSAVE BGREWRITEAOF REPLICAOF SLAVEOF SYNC PSYNC MIGRATE FUNCTION FCALL FCALL_RO
  PSUBSCRIBE PUNSUBSCRIBE PFDEBUG PFSELFTEST SHUTDOWN)
STANDIN_ARGS=(--maxmemory-policy volatile-lru --busy-reply-threshold 5000)
for _c in "${SERVERLESS_LACKS[@]}"; do
  STANDIN_ARGS+=(--rename-command "$_c" "")
done
unset _c
