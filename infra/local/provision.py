#!/usr/bin/env python3
"""Creates the local queues, tables, event bus and rules from
infra/local/resources.json, idempotently.

Talks to each service where infra/local/env.sh points it (AWS_ENDPOINT_URL, or a
service's own AWS_ENDPOINT_URL_<SERVICE>: moto server, LocalStack). Safe to
re-run: existing resources are left as they are (attributes are brought in
line), and the resulting URLs and names are written to the env file
(STACK_ENV, .local/stack.env by default) for infra/local/env.sh to pick up.

Usage: provision.py [--prefix P --env-file F]: a second, separate set of
resources named P<name>, described in F (the contract test uses one of its
own, so it starts from empty tables).
"""
import argparse
import json
import os
import pathlib
import sys
import time

from botocore.exceptions import ClientError

from infra.local.settings import aws

ROOT = pathlib.Path(__file__).resolve().parents[2]


def gsi_spec(g):
    return {
        "IndexName": g["name"],
        "KeySchema": [{"AttributeName": g["hashKey"], "KeyType": "HASH"}]
        + ([{"AttributeName": g["rangeKey"], "KeyType": "RANGE"}] if g.get("rangeKey") else []),
        "Projection": {"ProjectionType": g.get("projection", "ALL")}
        | ({"NonKeyAttributes": g["nonKeyAttributes"]} if g.get("nonKeyAttributes") else {}),
    }


def add_missing_indexes(ddb, name, spec, table):
    """Brings a table created by an older version up to date."""
    have = {g["IndexName"] for g in table.get("GlobalSecondaryIndexes", [])}
    for g in spec.get("globalSecondaryIndexes", []):
        if g["name"] in have:
            continue
        ddb.update_table(
            TableName=name,
            AttributeDefinitions=[
                {"AttributeName": a, "AttributeType": t} for a, t in spec["attributes"].items()
            ],
            GlobalSecondaryIndexUpdates=[{"Create": gsi_spec(g)}],
        )
        print(f"added index {g['name']} to {name}")


def ensure_table(ddb, spec, prefix=""):
    name = prefix + spec["localName"]
    try:
        table = ddb.describe_table(TableName=name)["Table"]
        add_missing_indexes(ddb, name, spec, table)
        if spec.get("stream") and not table.get("StreamSpecification", {}).get("StreamEnabled"):
            ddb.update_table(
                TableName=name, StreamSpecification={"StreamEnabled": True, "StreamViewType": spec["stream"]}
            )
            print(f"enabled the stream of {name}")
    except ClientError as e:
        if e.response["Error"]["Code"] != "ResourceNotFoundException":
            raise
        keys = [{"AttributeName": spec["hashKey"], "KeyType": "HASH"}]
        if spec.get("rangeKey"):
            keys.append({"AttributeName": spec["rangeKey"], "KeyType": "RANGE"})
        args = {
            "TableName": name,
            "KeySchema": keys,
            "AttributeDefinitions": [
                {"AttributeName": a, "AttributeType": t} for a, t in spec["attributes"].items()
            ],
            "BillingMode": "PAY_PER_REQUEST",
        }
        gsis = [gsi_spec(g) for g in spec.get("globalSecondaryIndexes", [])]
        if gsis:
            args["GlobalSecondaryIndexes"] = gsis
        if spec.get("stream"):
            args["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": spec["stream"]}
        ddb.create_table(**args)
        print(f"created table {name}")
    for _ in range(100):
        if ddb.describe_table(TableName=name)["Table"]["TableStatus"] == "ACTIVE":
            break
        time.sleep(0.1)
    if spec.get("ttlAttribute"):
        current = ddb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
        if current.get("TimeToLiveStatus") not in ("ENABLED", "ENABLING"):
            ddb.update_time_to_live(
                TableName=name,
                TimeToLiveSpecification={"Enabled": True, "AttributeName": spec["ttlAttribute"]},
            )
    return name


def ensure_queue(sqs, spec, dlq_arn=None, prefix=""):
    attrs = {
        "VisibilityTimeout": str(spec["visibilityTimeout"]),
        "MessageRetentionPeriod": str(spec["messageRetentionPeriod"]),
    }
    if dlq_arn:
        attrs["RedrivePolicy"] = json.dumps(
            {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(spec["maxReceiveCount"])}
        )
    # FIFO is fixed at creation (and the name must end in .fifo); high
    # throughput means quotas and deduplication per message group.
    created = {"FifoQueue": "true"} if spec.get("fifo") else {}
    if spec.get("highThroughput"):
        created.update({"DeduplicationScope": "messageGroup", "FifoThroughputLimit": "perMessageGroupId"})
    url = sqs.create_queue(QueueName=prefix + spec["localName"], Attributes=created)["QueueUrl"]
    sqs.set_queue_attributes(QueueUrl=url, Attributes=attrs)
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return url, arn


def ensure_bus(events, sqs, spec, queue_arns, prefix=""):
    """The custom bus and its rules, each with its SQS target (and the
    target's dead-letter queue); a rule with no detail types takes every
    event of the source."""
    name = prefix + spec["localName"]
    try:
        events.describe_event_bus(Name=name)
    except ClientError as e:
        if e.response["Error"]["Code"] != "ResourceNotFoundException":
            raise
        events.create_event_bus(Name=name)
        print(f"created event bus {name}")
    for rule_name, rule in spec["rules"].items():
        pattern = {"source": [spec["source"]]}
        if rule["detailTypes"]:
            pattern["detail-type"] = rule["detailTypes"]
        events.put_rule(Name=prefix + rule_name, EventBusName=name, EventPattern=json.dumps(pattern))
        target = {"Id": rule["target"], "Arn": queue_arns[rule["target"]]}
        if rule.get("deadLetterQueue"):
            target["DeadLetterConfig"] = {"Arn": queue_arns[rule["deadLetterQueue"]]}
        events.put_targets(Rule=prefix + rule_name, EventBusName=name, Targets=[target])
    return name


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--prefix", default="")
    parser.add_argument("--env-file", default=os.environ.get("STACK_ENV") or str(ROOT / ".local" / "stack.env"))
    args = parser.parse_args()
    resources = json.loads((ROOT / "infra" / "local" / "resources.json").read_text())
    ddb, sqs = aws("dynamodb"), aws("sqs")
    env = {}
    for spec in resources["tables"].values():
        env[spec["env"]] = ensure_table(ddb, spec, args.prefix)
    queues = resources["queues"]
    arns = {}
    # Dead-letter queues first, so redrive policies can name them.
    for logical in sorted(queues, key=lambda q: "deadLetterQueue" in queues[q]):
        spec = queues[logical]
        dlq_arn = arns.get(spec.get("deadLetterQueue"))
        url, arns[logical] = ensure_queue(sqs, spec, dlq_arn, args.prefix)
        env[spec["env"]] = url
    events = aws("events")
    for spec in resources.get("buses", {}).values():
        env[spec["env"]] = ensure_bus(events, sqs, spec, arns, args.prefix)
    out = pathlib.Path(args.env_file)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(f"{k}={v}\n" for k, v in sorted(env.items())))
    for k, v in sorted(env.items()):
        print(f"{k}={v}")


if __name__ == "__main__":
    sys.exit(main())
