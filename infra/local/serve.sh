#!/usr/bin/env bash
# Serves the functions locally with `cargo lambda watch` (rebuilds on change;
# extra arguments go to it, e.g. --ignore-changes)
# on 127.0.0.1:$LAMBDA_PORT (infra/local/env.sh; 9000 unless set):
#   POST /lambda-url/grab/coupons/{couponId}/grab      the grab (function URL)
#   GET  /lambda-url/wallet/me/coupons                  the wallet
#   POST /2015-03-31/functions/{name}/invocations       invoke API (issuer,
#                                                       reconciler, notifier),
#                                                       as the event pump does
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/infra/local/env.sh"
cd "$root"
# A service's own endpoint where one is set (LOCAL_AWS=localstack: SQS and
# EventBridge; make chaos: SQS behind its fault proxy).
endpoints=()
for var in AWS_ENDPOINT_URL_SQS AWS_ENDPOINT_URL_EVENTBRIDGE; do
  if [ -n "${!var:-}" ]; then endpoints+=(--env-var "$var=${!var}"); fi
done
exec cargo lambda watch \
  --invoke-address 127.0.0.1 \
  --invoke-port "$LAMBDA_PORT" \
  --concurrency "${LAMBDA_CONCURRENCY:-4}" \
  --env-file "$root/infra/local/functions.env" \
  --env-var "REDIS_URL=$REDIS_URL" \
  --env-var "GRANT_QUEUE_URL=$GRANT_QUEUE_URL" \
  --env-var "GRANT_DLQ_URL=$GRANT_DLQ_URL" \
  --env-var "REPAIR_QUEUE_URL=$REPAIR_QUEUE_URL" \
  --env-var "COUPONS_TABLE=$COUPONS_TABLE" \
  --env-var "USER_COUPONS_TABLE=$USER_COUPONS_TABLE" \
  --env-var "CLAIMS_TABLE=$CLAIMS_TABLE" \
  --env-var "EVENT_BUS_NAME=${EVENT_BUS_NAME:-coupon-events}" \
  --env-var "AWS_ENDPOINT_URL=$AWS_ENDPOINT_URL" \
  "${endpoints[@]}" \
  --env-var "AWS_REGION=$AWS_REGION" \
  --env-var "AWS_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID" \
  --env-var "AWS_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY" \
  "$@"
