#!/usr/bin/env bash
# Deploys what `sam build` left in .aws-sam/build to a stage (dev or prod):
# the stage's settings from samconfig.toml, plus the app's identity provider
# (JWT_ISSUER, JWT_AUDIENCE) and optionally ALARM_TOPIC_ARN from the
# environment. The deploy pipeline (.github/workflows/ci.yml) runs it with
# credentials from OIDC; by hand it needs the same variables and credentials.
#
# Usage: infra/deploy/deploy.sh dev|prod
set -euo pipefail
cd "$(dirname "$0")/../.."
stage=${1:?usage: infra/deploy/deploy.sh dev|prod}
: "${JWT_ISSUER:?set JWT_ISSUER to the issuer (iss) of the app's user tokens}"
: "${JWT_AUDIENCE:?set JWT_AUDIENCE to the accepted audiences, comma-separated}"
params=$(python3 - "$stage" <<'PY'
import sys, tomllib
with open("samconfig.toml", "rb") as f:
    print(tomllib.load(f)[sys.argv[1]]["deploy"]["parameters"]["parameter_overrides"])
PY
)
extra=("JwtIssuer=$JWT_ISSUER" "JwtAudience=$JWT_AUDIENCE")
if [ -n "${ALARM_TOPIC_ARN:-}" ]; then
  extra+=("AlarmTopicArn=$ALARM_TOPIC_ARN")
fi
# --parameter-overrides replaces samconfig's list, so it is passed whole.
# shellcheck disable=SC2086
sam deploy --config-env "$stage" --no-confirm-changeset --no-fail-on-empty-changeset \
  --parameter-overrides $params "${extra[@]}"
