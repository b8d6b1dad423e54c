"""The local event pump honours partial batch responses like the SQS event
source mapping: failed messages stay on the queue, the rest are deleted, and
a failed invocation keeps the whole batch. Real SQS (the local endpoint); the
issuer's invocation is replaced by a function the test controls."""
import json
import os
import sys
import urllib.error
import pathlib
import uuid

import boto3
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import pump  # noqa: E402


@pytest.fixture
def queue(monkeypatch):
    sqs = boto3.client("sqs", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1")
    url = sqs.create_queue(QueueName=f"pump-test-{uuid.uuid4().hex[:12]}")["QueueUrl"]
    monkeypatch.setenv("GRANT_QUEUE_URL", url)
    # Failed messages come back at once instead of after the retry delay.
    monkeypatch.setattr(pump, "RETRY_AFTER_SECONDS", 0)
    for n in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"n": n}))
    yield sqs, url
    sqs.delete_queue(QueueUrl=url)


def remaining(sqs, url):
    bodies = []
    while True:
        out = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0, VisibilityTimeout=30)
        messages = out.get("Messages", [])
        if not messages:
            return sorted(json.loads(m["Body"])["n"] for m in bodies)
        bodies += messages


def test_only_the_messages_the_issuer_reports_failed_stay_on_the_queue(queue, monkeypatch):
    sqs, url = queue
    batches = []

    def issuer(function, payload, timeout=120):
        assert function == "issuer"
        records = payload["Records"]
        assert all(r["eventSource"] == "aws:sqs" and r["receiptHandle"] for r in records)
        batches.append(records)
        failed = [r["messageId"] for r in records if json.loads(r["body"])["n"] == 1]
        return {"batchItemFailures": [{"itemIdentifier": m} for m in failed]}

    monkeypatch.setattr(pump, "invoke", issuer)
    p = pump.Pump()
    for _ in range(20):
        if p.delivered == 2:
            break
        p.once()
    assert p.delivered == 2, "messages 0 and 2 acknowledged"
    assert p.failed >= 1
    assert remaining(sqs, url) == [1]


def test_a_failed_invocation_keeps_the_whole_batch(queue, monkeypatch):
    sqs, url = queue

    offered = set()

    def down(function, payload, timeout=120):
        offered.update(json.loads(r["body"])["n"] for r in payload["Records"])
        raise urllib.error.URLError("connection refused")

    monkeypatch.setattr(pump, "invoke", down)
    p = pump.Pump()
    for _ in range(20):
        if offered == {0, 1, 2}:
            break
        p.once()
    assert offered == {0, 1, 2}
    assert remaining(sqs, url) == [0, 1, 2]
    assert p.delivered == 0
