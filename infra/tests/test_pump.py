"""The local event pump honours partial batch responses like the SQS and
DynamoDB event source mappings: failed messages stay on the queue and the
rest are deleted, a failed invocation keeps the whole batch; stream records
are retried from the first one named, halved when the invocation fails, and
described on the failure queue once the retries are spent. Real SQS and
DynamoDB Streams (the local endpoint); the function's invocation is
replaced by one the test controls."""
import json
import os
import urllib.error
import uuid

import boto3
import pytest

from infra.local import pump


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


@pytest.fixture
def stream(monkeypatch):
    """A table of the test's own with a change stream, three writes on it,
    and a failure queue of its own."""
    kw = dict(endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1")
    ddb, sqs = boto3.client("dynamodb", **kw), boto3.client("sqs", **kw)
    table = f"pump-stream-{uuid.uuid4().hex[:12]}"
    ddb.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )
    ddb.put_item(TableName=table, Item={"pk": {"S": "a"}, "n": {"N": "0"}})
    ddb.put_item(TableName=table, Item={"pk": {"S": "b"}, "n": {"N": "1"}})
    ddb.update_item(
        TableName=table, Key={"pk": {"S": "a"}}, UpdateExpression="SET n = :n", ExpressionAttributeValues={":n": {"N": "2"}}
    )
    failures = sqs.create_queue(QueueName=f"pump-failures-{uuid.uuid4().hex[:12]}")["QueueUrl"]
    monkeypatch.setenv("USER_COUPONS_TABLE", table)
    monkeypatch.setenv("NOTIFIER_FAILURE_QUEUE_URL", failures)
    monkeypatch.setattr(pump.time, "sleep", lambda _: None)
    yield sqs, failures
    ddb.delete_table(TableName=table)
    sqs.delete_queue(QueueUrl=failures)


def n_of(record):
    return int(record["dynamodb"]["NewImage"]["n"]["N"])


def test_the_stream_reaches_the_notifier_in_order_and_a_named_failure_is_retried_from_itself(stream):
    calls = []

    def notifier(payload):
        records = payload["Records"]
        assert all(r["eventSource"] == "aws:dynamodb" and r["dynamodb"]["SequenceNumber"] for r in records)
        calls.append([n_of(r) for r in records])
        if len(calls) == 1:
            return {"batchItemFailures": [{"itemIdentifier": records[1]["dynamodb"]["SequenceNumber"]}]}
        return {"batchItemFailures": []}

    p = pump.StreamPump(notifier)
    p.drain()
    assert calls == [[0, 1, 2], [1, 2]], "retried from the first record named, never skipping it"
    assert p.delivered == 3 and p.given_up == 0


def test_a_failing_invocation_is_halved_and_what_keeps_failing_is_described_on_the_failure_queue(stream):
    sqs, failures = stream
    calls = []

    def notifier(payload):
        ns = [n_of(r) for r in payload["Records"]]
        calls.append(ns)
        if 1 in ns:
            raise RuntimeError("notifier failed: poison")
        return {"batchItemFailures": []}

    p = pump.StreamPump(notifier)
    p.drain()
    assert calls[0] == [0, 1, 2] and calls[1] == [0], calls
    assert p.delivered == 2 and p.given_up == 1
    out = sqs.receive_message(QueueUrl=failures, MaxNumberOfMessages=10)["Messages"]
    (info,) = [json.loads(m["Body"])["DDBStreamBatchInfo"] for m in out]
    assert info["batchSize"] == 1


def test_a_pump_started_again_reads_on_after_its_place_and_a_new_stream_from_the_start(stream, tmp_path):
    seen = []

    def notifier(payload):
        seen.append([n_of(r) for r in payload["Records"]])
        return {"batchItemFailures": []}

    place = tmp_path / "stream-position.json"
    first = pump.StreamPump(notifier, checkpoint=place)
    first.drain()
    assert seen == [[0, 1, 2]] and first.delivered == 3
    saved = json.loads(place.read_text())
    assert saved["streamArn"] == first.arn and saved["shards"], saved

    kw = dict(endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1")
    boto3.client("dynamodb", **kw).put_item(
        TableName=os.environ["USER_COUPONS_TABLE"], Item={"pk": {"S": "c"}, "n": {"N": "3"}}
    )
    again = pump.StreamPump(notifier, checkpoint=place)
    again.drain()
    assert seen == [[0, 1, 2], [3]], "only the change made since"

    # A place kept for another stream (the table was created again) is not
    # this stream's: it is read from its trim horizon.
    place.write_text(json.dumps({"streamArn": "arn:aws:dynamodb:us-east-1:0:table/x/stream/old",
                                 "shards": saved["shards"]}))
    fresh = pump.StreamPump(notifier, checkpoint=place)
    fresh.drain()
    assert seen[-1] == [0, 1, 2, 3]
