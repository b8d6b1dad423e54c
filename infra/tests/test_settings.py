"""The local stack's settings pick each service's endpoint the way the SDKs
do: `LOCAL_AWS=localstack` moves SQS and EventBridge (and nothing else) to
LocalStack's port, with queue URLs of its own, and every script's client
honours a service's own endpoint before the shared one."""
import os
import pathlib
import subprocess

from infra.local.settings import aws

ROOT = pathlib.Path(__file__).resolve().parents[2]


def sourced(**env):
    """The variables infra/local/env.sh exports under `env` (nothing inherited),
    and the env file it reads the queue URLs from."""
    out = subprocess.run(
        ["bash", "-c", '. infra/local/env.sh && env && echo "STACK_ENV=$STACK_ENV"'],
        cwd=ROOT, capture_output=True, text=True, check=True,
        env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), **env},
    ).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def test_localstack_moves_sqs_and_eventbridge_and_keeps_its_own_queue_urls():
    moto, localstack = sourced(), sourced(LOCAL_AWS="localstack", LOCALSTACK_PORT="4999")
    assert "AWS_ENDPOINT_URL_SQS" not in moto
    assert localstack["AWS_ENDPOINT_URL_SQS"] == "http://127.0.0.1:4999"
    assert localstack["AWS_ENDPOINT_URL_EVENTBRIDGE"] == "http://127.0.0.1:4999"
    # DynamoDB and its streams stay where AWS_ENDPOINT_URL points (moto).
    assert "AWS_ENDPOINT_URL_DYNAMODB" not in localstack
    assert localstack["AWS_ENDPOINT_URL"] == moto["AWS_ENDPOINT_URL"]
    assert localstack["STACK_ENV"] != moto["STACK_ENV"]


def test_an_unknown_local_aws_is_refused_by_name():
    out = subprocess.run(["bash", "-c", ". infra/local/env.sh"], cwd=ROOT, capture_output=True, text=True,
                         env={"PATH": os.environ["PATH"], "LOCAL_AWS": "docker"})
    assert out.returncode != 0
    assert "LOCAL_AWS=docker" in out.stderr


def test_a_script_s_client_meets_a_service_on_its_own_endpoint_first(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:4566")
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", "http://127.0.0.1:4999")
    monkeypatch.delenv("AWS_ENDPOINT_URL_DYNAMODB", raising=False)
    assert aws("sqs").meta.endpoint_url == "http://127.0.0.1:4999"
    assert aws("dynamodb").meta.endpoint_url == "http://127.0.0.1:4566"
