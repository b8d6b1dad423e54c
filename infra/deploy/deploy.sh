#!/usr/bin/env bash
# Deploys what `sam build` left in .aws-sam/build to a stage (dev or prod):
# the stage's settings from samconfig.toml, plus the app's identity provider
# (JWT_ISSUER, JWT_AUDIENCE) and optionally ALARM_TOPIC_ARN from the
# environment, plus any `Name=Value` given after the stage (a one-off
# setting such as the warm-start schedule), each replacing only the
# parameter it names. The deploy pipeline (.github/workflows/ci.yml) runs it
# with credentials from OIDC; by hand it needs the same variables and
# credentials.
#
# Why not `sam deploy --config-env STAGE --parameter-overrides ...`: an
# override list on the command line replaces the stage's whole list in
# samconfig.toml, so the stage would silently get the template's defaults
# (a production-sized cluster for dev). This script always sends the
# stage's list with the additions merged in.
#
# Usage: infra/deploy/deploy.sh dev|prod [Name=Value ...]
# DEPLOY_DRY_RUN=1 prints the sam command instead of running it.
set -euo pipefail
cd "$(dirname "$0")/../.."
stage=${1:?usage: infra/deploy/deploy.sh dev|prod [Name=Value ...]}
shift
: "${JWT_ISSUER:?set JWT_ISSUER to the issuer (iss) of the user tokens of the app}"
: "${JWT_AUDIENCE:?set JWT_AUDIENCE to the accepted audiences, comma-separated}"
extra=("JwtIssuer=$JWT_ISSUER" "JwtAudience=$JWT_AUDIENCE")
if [ -n "${ALARM_TOPIC_ARN:-}" ]; then
  extra+=("AlarmTopicArn=$ALARM_TOPIC_ARN")
fi
# The stage's list, then the additions (infra/deploy/stage_params.py), one
# parameter a line, so a value may hold spaces.
mapfile -t params < <(python3 infra/deploy/stage_params.py "$stage" "${extra[@]}" "$@")
[ "${#params[@]}" -gt 0 ] || exit 1
flags=(--config-env "$stage" --no-fail-on-empty-changeset)
# The pipeline has no one to confirm a change set; a person at a terminal
# gets the stage's own confirm_changeset (prod asks).
[ -t 0 ] || flags+=(--no-confirm-changeset)
cmd=(sam deploy "${flags[@]}" --parameter-overrides "${params[@]}")
if [ -n "${DEPLOY_DRY_RUN:-}" ]; then
  printf '%q ' "${cmd[@]}"; echo
else
  exec "${cmd[@]}"
fi
