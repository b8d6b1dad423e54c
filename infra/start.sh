#!/usr/bin/env bash
# Starts redis-server, a 3-master Redis Cluster and moto server on loopback
# unless something already answers on their ports, then provisions the queues
# and tables. Idempotent.
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

# The cluster: three masters, no replicas, slots split evenly.
cluster_ports=($REDIS_CLUSTER_PORTS)
for port in "${cluster_ports[@]}"; do
  if ! listening "$port"; then
    rm -f "$state/cluster-$port.conf"
    redis-server --port "$port" --bind 127.0.0.1 --daemonize yes \
      --cluster-enabled yes --cluster-config-file "cluster-$port.conf" \
      --save '' --appendonly no --dir "$state" \
      --pidfile "$state/redis-$port.pid" --logfile "$state/redis-$port.log"
    wait_for "$port" "redis-server (cluster node)" "$state/redis-$port.log"
  fi
done
cluster_ok() { redis-cli -p "${cluster_ports[0]}" cluster info 2>/dev/null | grep -q 'cluster_state:ok'; }
if ! cluster_ok; then
  nodes=()
  for port in "${cluster_ports[@]}"; do nodes+=("127.0.0.1:$port"); done
  redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >"$state/cluster-create.log" 2>&1 || {
    echo "could not create the Redis Cluster; see $state/cluster-create.log" >&2
    exit 1
  }
  for _ in $(seq 1 100); do cluster_ok && break; sleep 0.1; done
  cluster_ok || { echo "the Redis Cluster did not become ready" >&2; exit 1; }
  echo "redis cluster on 127.0.0.1:${REDIS_CLUSTER_PORTS// /,}"
fi

if ! listening "$AWS_PORT"; then
  nohup "$VENV/bin/python" "$root/infra/moto_server.py" -H 127.0.0.1 -p "$AWS_PORT" >"$state/moto.log" 2>&1 &
  echo $! >"$state/moto.pid"
  wait_for "$AWS_PORT" "moto server" "$state/moto.log"
  echo "moto server on 127.0.0.1:$AWS_PORT"
fi

"$VENV/bin/python" "$root/infra/provision.py" >"$state/provision.log"
cat "$state/provision.log"
