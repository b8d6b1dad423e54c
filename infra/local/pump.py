#!/usr/bin/env python3
"""The local stand-in for the event source mappings and the schedule.

In AWS, Lambda polls the grant queue and invokes the issuer with batches,
deleting what the function did not report in `batchItemFailures`; polls the
repair queue and invokes the reconciler with the coupons grabs found lost;
reads the user-coupons change stream and invokes the notifier; and
EventBridge Scheduler invokes the reconciler. Locally this script does all
four against the functions served by `cargo lambda watch` (infra/local/serve.sh):

    pump.py                 run forever: pump, and reconcile every 10 s
    pump.py --drain         pump until the queue is empty, reconcile once,
                            print the reconciler's report as JSON, exit

Messages the issuer reports failed stay on the queue and come back after a
short visibility timeout (SQS's redelivery); a failed invocation leaves the
whole batch there.

The stream is read as the DynamoDB event source mapping reads it (see
`StreamPump`): batches in order, retried from the first record the notifier
names in `batchItemFailures`, halved when the invocation itself fails, and
after `STREAM_MAX_RETRIES` retries described on the notifier's failure
queue, so nothing is skipped in silence.
"""
import argparse
import json
import os
import pathlib
import sys
import threading
import time
import urllib.error
import urllib.request

from infra.local.settings import aws, port

LAMBDA = f"http://127.0.0.1:{port('LAMBDA_PORT')}"
RETRY_AFTER_SECONDS = 2


def invoke(function, payload, timeout=120):
    """Invokes a function through the Lambda invoke API of `cargo lambda watch`."""
    request = urllib.request.Request(
        f"{LAMBDA}/2015-03-31/functions/{function}/invocations",
        data=json.dumps(payload).encode(),
        headers={"content-type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        body = json.loads(response.read() or b"null")
    if isinstance(body, dict) and "errorType" in body:
        raise RuntimeError(f"{function} failed: {body.get('errorType')}: {body.get('errorMessage')}")
    return body


def sqs_event(messages, queue_arn):
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m.get("Attributes", {}),
                "messageAttributes": {},
                "md5OfBody": m.get("MD5OfBody", ""),
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": os.environ.get("AWS_REGION", "us-east-1"),
            }
            for m in messages
        ]
    }


class Pump:
    def __init__(self):
        self.sqs = aws("sqs")
        self.queue = os.environ["GRANT_QUEUE_URL"]
        self.arn = self.sqs.get_queue_attributes(QueueUrl=self.queue, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        self.delivered = 0
        self.failed = 0
        self.repair_queue = os.environ.get("REPAIR_QUEUE_URL")
        self.repairs = 0

    def repair(self):
        """One batch of repair requests to the reconciler; how many."""
        if not self.repair_queue:
            return 0
        out = self.sqs.receive_message(QueueUrl=self.repair_queue, MaxNumberOfMessages=10, WaitTimeSeconds=0)
        messages = out.get("Messages", [])
        if not messages:
            return 0
        arn = self.repair_queue.rsplit("/", 1)[-1]
        try:
            invoke("reconciler", sqs_event(messages, f"arn:aws:sqs:local:000000000000:{arn}"))
        except (urllib.error.URLError, RuntimeError, TimeoutError) as e:
            print(f"pump: repair pass failed, requests come back: {e}", file=sys.stderr)
            for m in messages:
                self.sqs.change_message_visibility(
                    QueueUrl=self.repair_queue, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=RETRY_AFTER_SECONDS
                )
            return len(messages)
        self.sqs.delete_message_batch(
            QueueUrl=self.repair_queue,
            Entries=[{"Id": str(j), "ReceiptHandle": m["ReceiptHandle"]} for j, m in enumerate(messages)],
        )
        self.repairs += len(messages)
        return len(messages)

    def once(self):
        """One batch: returns how many messages were handed to the issuer."""
        out = self.sqs.receive_message(
            QueueUrl=self.queue, MaxNumberOfMessages=10, WaitTimeSeconds=0, AttributeNames=["All"]
        )
        messages = out.get("Messages", [])
        if not messages:
            return 0
        try:
            # Within the issuer's Lambda timeout (30 s) and a margin: an
            # invocation the local emulator lost comes back as a failed
            # batch, as a timed-out one does in AWS.
            response = invoke("issuer", sqs_event(messages, self.arn), timeout=45)
            failed = {f["itemIdentifier"] for f in (response or {}).get("batchItemFailures", [])}
        except (urllib.error.URLError, RuntimeError, TimeoutError) as e:
            print(f"pump: issuer invocation failed, batch stays on the queue: {e}", file=sys.stderr)
            failed = {m["MessageId"] for m in messages}
        done = [m for m in messages if m["MessageId"] not in failed]
        for i in range(0, len(done), 10):
            chunk = done[i : i + 10]
            self.sqs.delete_message_batch(
                QueueUrl=self.queue,
                Entries=[{"Id": str(j), "ReceiptHandle": m["ReceiptHandle"]} for j, m in enumerate(chunk)],
            )
        for m in messages:
            if m["MessageId"] in failed:
                self.sqs.change_message_visibility(
                    QueueUrl=self.queue, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=RETRY_AFTER_SECONDS
                )
        self.delivered += len(done)
        self.failed += len(failed)
        return len(messages)

    def in_flight(self):
        attrs = self.sqs.get_queue_attributes(
            QueueUrl=self.queue,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])

    def drain(self, quiet_seconds=1.0, deadline_seconds=600):
        """Pumps until nothing is visible or in flight for `quiet_seconds`."""
        start = time.monotonic()
        quiet_since = None
        while time.monotonic() - start < deadline_seconds:
            if self.once():
                quiet_since = None
                continue
            if self.in_flight() == 0:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since >= quiet_seconds:
                    return True
            time.sleep(0.1)
        return False


STREAM_MAX_RETRIES = 3
STREAM_BATCH = 100
# Where `make pump` and `pump.py --drain` keep their place in the stream.
STREAM_CHECKPOINT = pathlib.Path(__file__).resolve().parents[2] / ".local" / "stream-position.json"


class StreamPump:
    """The user-coupons change stream to the notifier, as Lambda's DynamoDB
    event source mapping (with `ReportBatchItemFailures`,
    `BisectBatchOnFunctionError` and an on-failure destination) does it.

    Keeps its place as the event source mapping does: with a `checkpoint`
    file, each shard's last handled sequence number is written there after
    every batch (handled: delivered, or described on the failure queue),
    and a pump started again reads on after it, so `make pump` and
    `pump.py --drain` hand the notifier only what is new. A shard it has no
    place for (a new shard, a new stream: the table was created again) is
    read from its trim horizon, so a pump started late still delivers every
    change; a crash between a batch and its checkpoint delivers that batch
    again, which consumers absorb by event id (as they must for Lambda's
    retries)."""

    def __init__(self, invoke_fn=None, checkpoint=None):
        ddb = aws("dynamodb")
        self.streams = aws("dynamodbstreams")
        self.sqs = aws("sqs")
        self.failure_queue = os.environ.get("NOTIFIER_FAILURE_QUEUE_URL")
        self.arn = ddb.describe_table(TableName=os.environ["USER_COUPONS_TABLE"])["Table"].get("LatestStreamArn")
        self.iterators = {}
        self.checkpoint = pathlib.Path(checkpoint) if checkpoint else None
        self.positions = self._load_positions()
        # Within the notifier's Lambda timeout and a margin, as the issuer's.
        self.invoke = invoke_fn or (lambda payload: invoke("notifier", payload, timeout=45))
        self.delivered = 0
        self.given_up = 0

    def _load_positions(self):
        """Each shard's last handled sequence number, if the checkpoint is
        of this stream."""
        if not (self.checkpoint and self.arn and self.checkpoint.exists()):
            return {}
        try:
            saved = json.loads(self.checkpoint.read_text())
        except (OSError, ValueError):
            return {}
        return dict(saved.get("shards", {})) if saved.get("streamArn") == self.arn else {}

    def _save_positions(self):
        if not self.checkpoint:
            return
        self.checkpoint.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.checkpoint.with_suffix(".tmp")
        tmp.write_text(json.dumps({"streamArn": self.arn, "shards": self.positions}, indent=1))
        tmp.replace(self.checkpoint)

    def _iterators(self):
        if not self.arn:
            return {}
        shards = self.streams.describe_stream(StreamArn=self.arn)["StreamDescription"]["Shards"]
        for shard in shards:
            sid = shard["ShardId"]
            if sid in self.iterators:
                continue
            after = self.positions.get(sid)
            try:
                where = ({"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": after} if after
                         else {"ShardIteratorType": "TRIM_HORIZON"})
                out = self.streams.get_shard_iterator(StreamArn=self.arn, ShardId=sid, **where)
            except self.streams.exceptions.TrimmedDataAccessException:
                # Its place is older than the stream keeps (24 hours).
                out = self.streams.get_shard_iterator(StreamArn=self.arn, ShardId=sid, ShardIteratorType="TRIM_HORIZON")
            self.iterators[sid] = out["ShardIterator"]
        return self.iterators

    def once(self):
        """One read of every shard; returns how many records were handled."""
        handled = 0
        for shard, iterator in list(self._iterators().items()):
            if iterator is None:
                continue
            out = self.streams.get_records(ShardIterator=iterator, Limit=STREAM_BATCH)
            records = out.get("Records", [])
            if records:
                self.deliver([self.lambda_record(r) for r in records])
                handled += len(records)
                self.positions[shard] = records[-1]["dynamodb"]["SequenceNumber"]
                self._save_positions()
            self.iterators[shard] = out.get("NextShardIterator")
        return handled

    def lambda_record(self, r):
        """A stream record in the shape Lambda hands the function."""
        d = dict(r["dynamodb"])
        created = d.get("ApproximateCreationDateTime")
        if hasattr(created, "timestamp"):
            d["ApproximateCreationDateTime"] = created.timestamp()
        return {
            "eventID": r.get("eventID"),
            "eventName": r.get("eventName"),
            "eventVersion": r.get("eventVersion", "1.1"),
            "eventSource": "aws:dynamodb",
            "awsRegion": os.environ.get("AWS_REGION", "us-east-1"),
            "dynamodb": d,
            "eventSourceARN": self.arn,
        }

    def deliver(self, records, retries=STREAM_MAX_RETRIES):
        """Delivers `records` in order: what the notifier names failed is
        retried from the first one named; a failed invocation halves the
        batch; what still fails after the retries goes to the failure
        queue."""
        while records:
            try:
                response = self.invoke({"Records": records}) or {}
                named = {f.get("itemIdentifier") for f in response.get("batchItemFailures", [])}
            except (urllib.error.URLError, RuntimeError, TimeoutError) as e:
                print(f"pump: notifier invocation failed: {e}", file=sys.stderr)
                named = None
            if named is not None and not named:
                self.delivered += len(records)
                return
            if named is None and len(records) > 1:
                half = len(records) // 2
                self.deliver(records[:half], retries - 1)
                self.deliver(records[half:], retries - 1)
                return
            first = 0
            if named:
                first = next((i for i, r in enumerate(records) if r["dynamodb"]["SequenceNumber"] in named), 0)
            self.delivered += first
            records = records[first:]
            if retries <= 0:
                self.give_up(records)
                return
            retries -= 1
            time.sleep(0.2)

    def give_up(self, records):
        """What Lambda sends to the on-failure destination: the batch's place
        in the stream (the records stay in the stream for 24 hours)."""
        self.given_up += len(records)
        body = {
            "requestContext": {"condition": "RetryAttemptsExhausted"},
            "DDBStreamBatchInfo": {
                "streamArn": self.arn,
                "startSequenceNumber": records[0]["dynamodb"]["SequenceNumber"],
                "endSequenceNumber": records[-1]["dynamodb"]["SequenceNumber"],
                "batchSize": len(records),
            },
        }
        print(f"pump: notifier gave up on {len(records)} record(s)", file=sys.stderr)
        if self.failure_queue:
            self.sqs.send_message(QueueUrl=self.failure_queue, MessageBody=json.dumps(body))

    def drain(self, quiet_reads=2):
        """Reads until the stream has nothing new `quiet_reads` times."""
        quiet = 0
        while quiet < quiet_reads:
            quiet = 0 if self.once() else quiet + 1


def main():
    parser = argparse.ArgumentParser(description="Local SQS event source mapping and schedule.")
    parser.add_argument("--drain", action="store_true", help="pump until empty, reconcile once, print the report")
    parser.add_argument("--reconcile-every", type=float, default=10.0, help="seconds between reconciler runs")
    args = parser.parse_args()
    pump = Pump()
    stream = StreamPump(checkpoint=STREAM_CHECKPOINT)
    if args.drain:
        pump.drain()
        stream.drain()
        print(json.dumps(invoke("reconciler", {}), indent=2))
        return 0
    # Repair requests in a thread of their own, as their own event source
    # mapping in AWS: a repair pass that follows a coupon's wait for its
    # grants must not hold up the issuer that brings them through.
    def repairs():
        repairer = Pump()
        while True:
            try:
                if not repairer.repair():
                    time.sleep(0.2)
            except Exception as e:  # noqa: BLE001 keep serving repair requests
                print(f"pump: repair requests: {e}", file=sys.stderr)
                time.sleep(1)

    threading.Thread(target=repairs, daemon=True).start()
    next_reconcile = time.monotonic() + args.reconcile_every
    while True:
        if not (pump.once() + stream.once()):
            time.sleep(0.2)
        if time.monotonic() >= next_reconcile:
            try:
                report = invoke("reconciler", {})
                coupons = report.get("coupons", [])
                pending = sum(c["pending"] for c in coupons)
                drift = sum(abs(c["drift"]) for c in coupons)
                print(f"pump: delivered {pump.delivered}, reconciled {len(coupons)} coupon(s), "
                      f"pending {pending}, drift {drift}, dlq {report.get('dlqDepth')}", file=sys.stderr)
            except (urllib.error.URLError, RuntimeError, TimeoutError) as e:
                print(f"pump: reconciler failed: {e}", file=sys.stderr)
            next_reconcile = time.monotonic() + args.reconcile_every


if __name__ == "__main__":
    sys.exit(main())
