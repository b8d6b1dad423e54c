#!/usr/bin/env bash
# Stops what infra/start.sh started (and nothing else), and waits until the
# ports are free, so a start right after it starts fresh services.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/infra/env.sh"
state="$root/.local"
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
services="redis:$REDIS_PORT moto:$AWS_PORT"
for port in $REDIS_CLUSTER_PORTS; do services="$services redis-$port:$port"; done
for svc in $services; do
  name=${svc%%:*} port=${svc##*:}
  [ -f "$state/$name.pid" ] || continue
  pid=$(cat "$state/$name.pid")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || listening "$port" || break
      sleep 0.1
    done
    echo "stopped $name"
  fi
  rm -f "$state/$name.pid"
done
rm -f "$state/stack.env" "$state"/cluster-*.conf
