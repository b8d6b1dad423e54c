"""The local stack's settings as infra/local/env.sh exported them: one place for
every port, so a script never falls back to a number of its own."""

import os
import sys


def aws(service):
    """A boto3 client for `service` on the local endpoint infra/local/env.sh
    names. boto3 resolves it itself, as the Rust SDK does: a service's own
    AWS_ENDPOINT_URL_<SERVICE> (LOCAL_AWS=localstack sets those of SQS and
    EventBridge) before AWS_ENDPOINT_URL, so every script meets each service
    where the functions meet it."""
    import boto3

    if not os.environ.get("AWS_ENDPOINT_URL"):
        sys.exit("AWS_ENDPOINT_URL is not set: run this through make, or source infra/local/env.sh first")
    return boto3.client(service, region_name=os.environ.get("AWS_REGION", "us-east-1"))


def port(name):
    """The port `name` (e.g. LAMBDA_PORT) from the environment infra/local/env.sh
    set up; exits with a clear message when it is missing or malformed."""
    raw = os.environ.get(name)
    if raw is None:
        sys.exit(f"{name} is not set: run this through make, or source infra/local/env.sh first")
    try:
        value = int(raw)
    except ValueError:
        sys.exit(f"{name} must be a port number, not {raw!r}")
    if not 0 < value < 65536:
        sys.exit(f"{name} must be between 1 and 65535")
    return value
