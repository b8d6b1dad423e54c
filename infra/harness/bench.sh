#!/usr/bin/env bash
# `make bench`: the benchmark, on this machine, in one run.
#
# Starts what the benchmark needs beside the local stack and owned by it
# alone: a dedicated redis-server (no persistence; only the benchmark talks
# to it, so its command counts are the benchmark's) and a private moto
# server; then runs the Rust benchmark (bench/, profile bench-fast), the
# cold starts and the arm64 release sizes (infra/harness/bench_extra.py), and writes
# target/bench/summary.json. The local Redis Cluster from `make stack` is
# used for the cluster figure when it is running.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/infra/local/env.sh"
cd "$root"
state="$root/.local/bench"
mkdir -p "$state" target/bench

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

"$REDIS_SERVER" --port "$BENCH_REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
  --dir "$state" --logfile "$state/redis.log" &
pids+=($!)
"$VENV/bin/python" infra/local/moto_server.py -H 127.0.0.1 -p "$BENCH_AWS_PORT" >"$state/moto.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
  if "$REDIS_CLI" -p "$BENCH_REDIS_PORT" ping >/dev/null 2>&1 &&
    curl -s -o /dev/null "http://127.0.0.1:$BENCH_AWS_PORT/"; then
    break
  fi
  sleep 0.2
done
# Every service on the benchmark's own moto (none on LOCAL_AWS's endpoints).
unset AWS_ENDPOINT_URL_SQS AWS_ENDPOINT_URL_EVENTBRIDGE
export AWS_ENDPOINT_URL="http://127.0.0.1:$BENCH_AWS_PORT"
"$VENV/bin/python" -m infra.local.provision --env-file "$state/stack.env" >/dev/null
set -a; . "$state/stack.env"; set +a
export BENCH_REDIS_URL="redis://127.0.0.1:$BENCH_REDIS_PORT"
if "$REDIS_CLI" -p "${REDIS_CLUSTER_PORTS%% *}" cluster info 2>/dev/null | grep -q cluster_state:ok; then
  export BENCH_CLUSTER_URL="$REDIS_CLUSTER_URL"
fi

echo "== building (profile bench-fast)"
cargo build -q --profile bench-fast -p coupon-bench -p grab -p issuer -p reconciler -p wallet -p admin -p notifier
echo "== running the benchmark"
target/bench-fast/bench
if [ -n "${BENCH_ONLY:-}" ]; then
  exit 0 # one scenario, no summary
fi
echo "== cold starts and arm64 release sizes"
"$VENV/bin/python" -m infra.harness.bench_extra --state "$state"
