#!/usr/bin/env bash
# Stops what infra/start.sh started (and nothing else).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
state="$root/.local"
for svc in redis moto; do
  if [ -f "$state/$svc.pid" ]; then
    kill "$(cat "$state/$svc.pid")" 2>/dev/null && echo "stopped $svc"
    rm -f "$state/$svc.pid"
  fi
done
rm -f "$state/stack.env"
