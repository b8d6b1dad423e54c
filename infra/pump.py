#!/usr/bin/env python3
"""The local stand-in for the SQS event source mappings and the schedule.

In AWS, Lambda polls the grant queue and invokes the issuer with batches,
deleting what the function did not report in `batchItemFailures`; polls the
repair queue and invokes the reconciler with the coupons grabs found lost;
and EventBridge Scheduler invokes the reconciler. Locally this script does
all three against the functions served by `cargo lambda watch`
(infra/serve.sh):

    pump.py                 run forever: pump, and reconcile every 10 s
    pump.py --drain         pump until the queue is empty, reconcile once,
                            print the reconciler's report as JSON, exit

Messages the issuer reports failed stay on the queue and come back after a
short visibility timeout (SQS's redelivery); a failed invocation leaves the
whole batch there.
"""
import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request

import boto3

from localenv import port

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
        self.sqs = boto3.client(
            "sqs", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name=os.environ.get("AWS_REGION", "us-east-1")
        )
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
            response = invoke("issuer", sqs_event(messages, self.arn))
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


def main():
    parser = argparse.ArgumentParser(description="Local SQS event source mapping and schedule.")
    parser.add_argument("--drain", action="store_true", help="pump until empty, reconcile once, print the report")
    parser.add_argument("--reconcile-every", type=float, default=10.0, help="seconds between reconciler runs")
    args = parser.parse_args()
    pump = Pump()
    if args.drain:
        pump.drain()
        print(json.dumps(invoke("reconciler", {}), indent=2))
        return 0
    next_reconcile = time.monotonic() + args.reconcile_every
    while True:
        if not (pump.once() + pump.repair()):
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
