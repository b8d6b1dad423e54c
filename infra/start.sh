#!/usr/bin/env bash
# Starts redis-server and moto server on loopback unless something already
# answers on their ports, then provisions the queues and tables. Idempotent.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/infra/env.sh"
state="$root/.local"
mkdir -p "$state"

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_for() {
  local port=$1 what=$2 log=$3
  for _ in $(seq 1 100); do
    listening "$port" && return 0
    sleep 0.1
  done
  echo "$what did not start on port $port; see $log" >&2
  tail -n 20 "$log" >&2 || true
  exit 1
}

if ! listening "$REDIS_PORT"; then
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --daemonize yes \
    --save '' --appendonly no --dir "$state" \
    --pidfile "$state/redis.pid" --logfile "$state/redis.log"
  wait_for "$REDIS_PORT" redis-server "$state/redis.log"
  echo "redis-server on 127.0.0.1:$REDIS_PORT"
fi

if ! listening "$AWS_PORT"; then
  nohup "$VENV/bin/python" "$root/infra/moto_server.py" -H 127.0.0.1 -p "$AWS_PORT" >"$state/moto.log" 2>&1 &
  echo $! >"$state/moto.pid"
  wait_for "$AWS_PORT" "moto server" "$state/moto.log"
  echo "moto server on 127.0.0.1:$AWS_PORT"
fi

"$VENV/bin/python" "$root/infra/provision.py" >"$state/provision.log"
cat "$state/provision.log"
