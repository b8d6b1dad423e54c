#!/usr/bin/env bash
# Stops what infra/local/start.sh started (and nothing else), and waits until the
# processes are gone, so a start right after it starts fresh services.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/infra/local/env.sh"
state="$root/.local"
# Every engine's servers (each engine has ports of its own), moto and
# LocalStack.
for pidfile in "$state"/redis.pid "$state"/redis-*.pid "$state"/valkey.pid "$state"/valkey-*.pid "$state"/moto.pid "$state"/localstack.pid; do
  [ -f "$pidfile" ] || continue
  name=$(basename "$pidfile" .pid)
  pid=$(cat "$pidfile")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    echo "stopped $name"
  fi
  rm -f "$pidfile"
done
rm -f "$state/stack.env" "$state/stack-localstack.env" "$state"/cluster-*.conf
