#!/usr/bin/env bash
# Installs what the local stack needs, where it is missing: redis-server from
# the OS packages, and a virtualenv (.venv) with moto server, boto3,
# cargo-lambda and pytest from PyPI. Safe to re-run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/infra/env.sh"

if ! command -v redis-server >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
    echo "installing redis-server (apt)"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server redis-tools >/dev/null
  else
    echo "redis-server is missing: install Redis 6.2 or newer and re-run" >&2
    exit 1
  fi
fi

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
stamp="$VENV/.requirements"
if ! cmp -s "$root/infra/requirements.txt" "$stamp" 2>/dev/null; then
  echo "installing Python tools into $VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$root/infra/requirements.txt"
  cp "$root/infra/requirements.txt" "$stamp"
fi
