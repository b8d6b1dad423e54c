# Sourced by the infra scripts and the Makefile: the local stack's settings.
# Every value can be overridden from the environment.
_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
: "${REDIS_PORT:=6379}"
: "${AWS_PORT:=4566}"
: "${REDIS_URL:=redis://127.0.0.1:${REDIS_PORT}}"
# A local 3-master Redis Cluster for the cluster tests (ElastiCache cluster mode).
: "${REDIS_CLUSTER_PORTS:=7001 7002 7003}"
: "${REDIS_CLUSTER_URL:=redis://127.0.0.1:${REDIS_CLUSTER_PORTS%% *}}"
: "${AWS_ENDPOINT_URL:=http://127.0.0.1:${AWS_PORT}}"
: "${AWS_REGION:=us-east-1}"
: "${AWS_ACCESS_KEY_ID:=test}"
: "${AWS_SECRET_ACCESS_KEY:=test}"
: "${VENV:=${_root}/.venv}"
export REDIS_PORT AWS_PORT REDIS_URL REDIS_CLUSTER_PORTS REDIS_CLUSTER_URL AWS_ENDPOINT_URL AWS_REGION AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY VENV
# Queue URLs and table names as the endpoint reported them at provisioning.
# STACK_ENV picks another set (the contract test provisions its own).
: "${STACK_ENV:=${_root}/.local/stack.env}"
if [ -f "${STACK_ENV}" ]; then
  set -a; . "${STACK_ENV}"; set +a
fi
export PATH="${VENV}/bin:${PATH}"
