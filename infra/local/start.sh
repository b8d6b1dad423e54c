#!/usr/bin/env bash
# Starts a Redis server, a 3-master Redis Cluster (both of the engine
# REDIS_ENGINE names: redis-server or valkey-server, each engine on ports of
# its own), moto server and, with LOCAL_AWS=localstack, LocalStack (SQS and
# EventBridge) on loopback unless something already answers on their ports,
# then provisions the queues, tables and bus. Idempotent.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/infra/local/env.sh"
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

# The engine of a server that answers on a port: "valkey" or "redis".
engine_on() { "$REDIS_CLI" -p "$1" INFO server 2>/dev/null | grep -q '^valkey_version:' && echo valkey || echo redis; }

# A server already on one of this engine's ports must be of this engine: a
# test run that believes it tests Valkey must not be talking to Redis.
check_engine() {
  local found
  found=$(engine_on "$1")
  if [ "$found" != "$REDIS_ENGINE" ]; then
    echo "port $1 is held by a $found server, but REDIS_ENGINE=$REDIS_ENGINE; stop it (make down) or choose other ports" >&2
    exit 1
  fi
}

e=$REDIS_ENGINE
if [ "$e" = valkey-serverless ]; then
  # The Serverless stand-in: one node, cluster mode, every slot its own;
  # the same server is REDIS_URL and REDIS_CLUSTER_URL.
  . "$root/infra/local/standin.sh"
  if ! listening "$REDIS_PORT"; then
    rm -f "$state/standin-$REDIS_PORT.conf"
    "$REDIS_SERVER" --port "$REDIS_PORT" --bind 127.0.0.1 --daemonize yes \
      --cluster-enabled yes --cluster-config-file "standin-$REDIS_PORT.conf" \
      --save '' --appendonly no --dir "$state" "${STANDIN_ARGS[@]}" \
      --pidfile "$state/$e.pid" --logfile "$state/$e.log"
    wait_for "$REDIS_PORT" "$REDIS_SERVER (Serverless stand-in)" "$state/$e.log"
    "$REDIS_CLI" -p "$REDIS_PORT" CLUSTER ADDSLOTSRANGE 0 16383 >/dev/null
    for _ in $(seq 1 100); do
      "$REDIS_CLI" -p "$REDIS_PORT" CLUSTER INFO 2>/dev/null | grep -q 'cluster_state:ok' && break
      sleep 0.1
    done
    "$REDIS_CLI" -p "$REDIS_PORT" CLUSTER INFO | grep -q 'cluster_state:ok' || {
      echo "the Serverless stand-in did not take its slots; see $state/$e.log" >&2
      exit 1
    }
    echo "$REDIS_SERVER (Serverless stand-in) on 127.0.0.1:$REDIS_PORT"
  fi
  "$REDIS_CLI" -p "$REDIS_PORT" INFO server 2>/dev/null | grep -q '^valkey_version:' || {
    echo "port $REDIS_PORT is not held by a valkey-server, but REDIS_ENGINE=$e" >&2
    exit 1
  }
  "$REDIS_CLI" -p "$REDIS_PORT" WAIT 0 0 2>&1 | grep -q 'unknown command' || {
    echo "port $REDIS_PORT answers WAIT: it is not the Serverless stand-in; stop it (make down)" >&2
    exit 1
  }
  cluster_ports=()
fi
if [ "$e" != valkey-serverless ] && ! listening "$REDIS_PORT"; then
  "$REDIS_SERVER" --port "$REDIS_PORT" --bind 127.0.0.1 --daemonize yes \
    --save '' --appendonly no --dir "$state" \
    --pidfile "$state/$e.pid" --logfile "$state/$e.log"
  wait_for "$REDIS_PORT" "$REDIS_SERVER" "$state/$e.log"
  echo "$REDIS_SERVER on 127.0.0.1:$REDIS_PORT"
fi
[ "$e" = valkey-serverless ] || check_engine "$REDIS_PORT"

# The cluster: three masters, no replicas, slots split evenly.
[ "$e" = valkey-serverless ] || cluster_ports=($REDIS_CLUSTER_PORTS)
for port in "${cluster_ports[@]}"; do
  if ! listening "$port"; then
    rm -f "$state/cluster-$port.conf"
    "$REDIS_SERVER" --port "$port" --bind 127.0.0.1 --daemonize yes \
      --cluster-enabled yes --cluster-config-file "cluster-$port.conf" \
      --save '' --appendonly no --dir "$state" \
      --pidfile "$state/$e-$port.pid" --logfile "$state/$e-$port.log"
    wait_for "$port" "$REDIS_SERVER (cluster node)" "$state/$e-$port.log"
  fi
  check_engine "$port"
done
cluster_ok() { "$REDIS_CLI" -p "${cluster_ports[0]}" cluster info 2>/dev/null | grep -q 'cluster_state:ok'; }
if [ "$e" != valkey-serverless ] && ! cluster_ok; then
  nodes=()
  for port in "${cluster_ports[@]}"; do nodes+=("127.0.0.1:$port"); done
  "$REDIS_CLI" --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >"$state/cluster-create.log" 2>&1 || {
    echo "could not create the Redis Cluster; see $state/cluster-create.log" >&2
    exit 1
  }
  for _ in $(seq 1 100); do cluster_ok && break; sleep 0.1; done
  cluster_ok || { echo "the Redis Cluster did not become ready" >&2; exit 1; }
  echo "$e cluster on 127.0.0.1:${REDIS_CLUSTER_PORTS// /,}"
fi

if ! listening "$AWS_PORT"; then
  nohup "$VENV/bin/python" "$root/infra/local/moto_server.py" -H 127.0.0.1 -p "$AWS_PORT" >"$state/moto.log" 2>&1 &
  echo $! >"$state/moto.pid"
  wait_for "$AWS_PORT" "moto server" "$state/moto.log"
  echo "moto server on 127.0.0.1:$AWS_PORT"
fi

# LocalStack in host mode (no Docker): SQS and EventBridge only, its files
# under .local/localstack; it neither fetches its TLS certificate (it makes
# its own) nor sends analytics (DISABLE_EVENTS).
if [ "$LOCAL_AWS" = localstack ] && ! listening "$LOCALSTACK_PORT"; then
  OVERRIDE_IN_DOCKER=0 FILESYSTEM_ROOT="$state/localstack" \
    GATEWAY_LISTEN="127.0.0.1:$LOCALSTACK_PORT" GATEWAY_SERVER=hypercorn \
    SERVICES=sqs,events SQS_ENDPOINT_STRATEGY=path DNS_ADDRESS=0 \
    SKIP_SSL_CERT_DOWNLOAD=1 DISABLE_EVENTS=1 \
    nohup "$LOCALSTACK_VENV/bin/python" -m localstack.runtime.main >"$state/localstack.log" 2>&1 &
  echo $! >"$state/localstack.pid"
  for _ in $(seq 1 600); do
    grep -q '^Ready\.' "$state/localstack.log" && break
    kill -0 "$(cat "$state/localstack.pid")" 2>/dev/null || break
    sleep 0.1
  done
  grep -q '^Ready\.' "$state/localstack.log" || {
    echo "LocalStack did not start on port $LOCALSTACK_PORT; see $state/localstack.log" >&2
    tail -n 20 "$state/localstack.log" >&2 || true
    exit 1
  }
  echo "LocalStack (SQS, EventBridge) on 127.0.0.1:$LOCALSTACK_PORT"
fi

(cd "$root" && "$VENV/bin/python" -m infra.local.provision --env-file "$STACK_ENV" >"$state/provision.log")
cat "$state/provision.log"
