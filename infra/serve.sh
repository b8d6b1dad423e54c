#!/usr/bin/env bash
# Serves the functions locally with `cargo lambda watch` (rebuilds on change):
# HTTP on 127.0.0.1:${LAMBDA_PORT:-9000}, e.g.
#   POST http://127.0.0.1:9000/lambda-url/grab/coupons/{couponId}/grab
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/infra/env.sh"
cd "$root"
exec cargo lambda watch \
  --invoke-address 127.0.0.1 \
  --invoke-port "${LAMBDA_PORT:-9000}" \
  --env-file "$root/infra/grab.env" \
  --env-var "REDIS_URL=$REDIS_URL" \
  --env-var "GRANT_QUEUE_URL=$GRANT_QUEUE_URL" \
  --env-var "AWS_ENDPOINT_URL=$AWS_ENDPOINT_URL" \
  --env-var "AWS_REGION=$AWS_REGION" \
  --env-var "AWS_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID" \
  --env-var "AWS_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY"
