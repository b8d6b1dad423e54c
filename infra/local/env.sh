# Sourced by the infra scripts and the Makefile: the local stack's settings.
# Every value can be overridden from the environment.
_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# The engine behind every Redis the stack, the tests and `make chaos` start:
# `redis` (Redis OSS 7.0, Debian's redis-server) or `valkey` (Valkey 8.0,
# Debian's valkey-server), the two engines ElastiCache offers. Their
# replication differs (since Redis 7.2 and in Valkey, WAIT counts only the
# writes of the connection that sends it), so everything runs on both. Each
# engine has its own ports, so both stacks can run at once.
: "${REDIS_ENGINE:=redis}"
case "$REDIS_ENGINE" in
  redis)
    : "${REDIS_SERVER:=redis-server}" "${REDIS_CLI:=redis-cli}"
    _redis_port=6379 _cluster_ports="7001 7002 7003" ;;
  valkey)
    : "${REDIS_SERVER:=valkey-server}" "${REDIS_CLI:=valkey-cli}"
    _redis_port=6380 _cluster_ports="7011 7012 7013" ;;
  # A stand-in for ElastiCache Serverless (Valkey): one Valkey 8.0 node in
  # cluster mode owning every slot (Serverless shows one virtual shard),
  # without the commands Serverless lacks (WAIT, CONFIG, KEYS, DEBUG, ...:
  # infra/local/standin.sh), volatile-lru, a 5 s script limit. The
  # functions run on it as on Serverless: CACHE_DURABILITY=none, no
  # replica acknowledgements, cluster mode.
  valkey-serverless)
    : "${REDIS_SERVER:=valkey-server}" "${REDIS_CLI:=valkey-cli}"
    _redis_port=6382 _cluster_ports="6382"
    : "${REDIS_CLUSTER:=true}"
    export REDIS_CLUSTER ;;
  *)
    echo "REDIS_ENGINE=$REDIS_ENGINE: expected redis, valkey or valkey-serverless" >&2
    return 1 2>/dev/null || exit 1 ;;
esac
export REDIS_ENGINE REDIS_SERVER REDIS_CLI
# Every port the local stack, the tests and the benchmark use, read here and
# nowhere else (scripts take them from the environment this file sets).
: "${REDIS_PORT:=$_redis_port}"
: "${AWS_PORT:=4566}"
# `make up` / `make pump` / `make demo`: the functions under cargo lambda watch.
: "${LAMBDA_PORT:=9000}"
# `make up`: the try-it page (infra/local/page.py), in front of LAMBDA_PORT.
: "${PAGE_PORT:=9080}"
# `make test-contract`: its own functions and its own moto, so it never meets
# a `make up` or the shared endpoint.
: "${CONTRACT_LAMBDA_PORT:=9100}"
: "${CONTRACT_AWS_PORT:=4567}"
# `make chaos`: its own functions (with SQS behind a fault-injecting proxy).
: "${CHAOS_LAMBDA_PORT:=9200}"
# `make bench`: a dedicated redis-server and moto.
: "${BENCH_REDIS_PORT:=6391}"
: "${BENCH_AWS_PORT:=4568}"
: "${REDIS_URL:=redis://127.0.0.1:${REDIS_PORT}}"
# A local 3-master Redis Cluster for the cluster tests (ElastiCache cluster mode).
: "${REDIS_CLUSTER_PORTS:=$_cluster_ports}"
: "${REDIS_CLUSTER_URL:=redis://127.0.0.1:${REDIS_CLUSTER_PORTS%% *}}"
: "${AWS_ENDPOINT_URL:=http://127.0.0.1:${AWS_PORT}}"
: "${AWS_REGION:=us-east-1}"
: "${AWS_ACCESS_KEY_ID:=test}"
: "${AWS_SECRET_ACCESS_KEY:=test}"
: "${VENV:=${_root}/.venv}"
export REDIS_PORT AWS_PORT LAMBDA_PORT PAGE_PORT CONTRACT_LAMBDA_PORT CONTRACT_AWS_PORT CHAOS_LAMBDA_PORT BENCH_REDIS_PORT BENCH_AWS_PORT REDIS_URL REDIS_CLUSTER_PORTS REDIS_CLUSTER_URL AWS_ENDPOINT_URL AWS_REGION AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY VENV
# The local AWS endpoint: `moto` (moto server for every service) or
# `localstack` (LocalStack for SQS and EventBridge, moto for DynamoDB and its
# streams: LocalStack's DynamoDB is DynamoDB Local, a Java jar it downloads
# at run time under the vendor's own licence). The SDKs (Rust and boto3)
# take a service's own endpoint from AWS_ENDPOINT_URL_<SERVICE> before
# AWS_ENDPOINT_URL, so one setting moves SQS and EventBridge and nothing else.
: "${LOCAL_AWS:=moto}"
: "${LOCALSTACK_PORT:=4570}"
: "${LOCALSTACK_VENV:=${_root}/.venv-localstack}"
case "$LOCAL_AWS" in
  moto) _stack_env=stack.env ;;
  localstack)
    : "${AWS_ENDPOINT_URL_SQS:=http://127.0.0.1:${LOCALSTACK_PORT}}"
    : "${AWS_ENDPOINT_URL_EVENTBRIDGE:=http://127.0.0.1:${LOCALSTACK_PORT}}"
    export AWS_ENDPOINT_URL_SQS AWS_ENDPOINT_URL_EVENTBRIDGE
    _stack_env=stack-localstack.env ;;
  *)
    echo "LOCAL_AWS=$LOCAL_AWS: expected moto or localstack" >&2
    return 1 2>/dev/null || exit 1 ;;
esac
export LOCAL_AWS LOCALSTACK_PORT LOCALSTACK_VENV

# A Python >= 3.13 for LocalStack (4.14 installs on 3.12 but its SQS
# provider imports `warnings.deprecated`, new in 3.13): LOCALSTACK_PYTHON,
# else the first python3.14/python3.13 on PATH or under pyenv. Prints its
# path, or nothing.
localstack_python() {
  local p
  for p in ${LOCALSTACK_PYTHON:-} python3.14 python3.13 "$HOME"/.pyenv/versions/3.1[3-9]*/bin/python; do
    command -v "$p" >/dev/null 2>&1 || continue
    if "$p" -c 'import sys; sys.exit(sys.version_info < (3, 13))' 2>/dev/null; then
      command -v "$p"
      return 0
    fi
  done
}

# Queue URLs and table names as the endpoint reported them at provisioning
# (a file per LOCAL_AWS: the two stacks' queues have different URLs).
# STACK_ENV picks another set (the contract test provisions its own).
: "${STACK_ENV:=${_root}/.local/${_stack_env}}"
if [ -f "${STACK_ENV}" ]; then
  set -a; . "${STACK_ENV}"; set +a
fi
export PATH="${VENV}/bin:${PATH}"
