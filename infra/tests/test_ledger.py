"""The one ledger reader of the harnesses reads what the issuer wrote: a
coupon's user coupons through the `by-coupon` index and its rejections in
the coupon's partition, every page of them. Against the local stack's own
tables."""
import os
import uuid

import boto3

from infra.harness.ledger import holders, ledger, rejected_ids


def test_the_ledger_reads_every_coupon_and_rejection_of_one_coupon_and_nothing_else():
    ddb = boto3.client("dynamodb", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1")
    coupon, other = f"ledger-{uuid.uuid4().hex[:10]}", f"ledger-{uuid.uuid4().hex[:10]}"
    for c, n in ((coupon, 3), (other, 1)):
        for i in range(n):
            ddb.put_item(TableName=os.environ["USER_COUPONS_TABLE"], Item={
                "pk": {"S": f"USER#u{i}"}, "sk": {"S": f"COUPON#{c}#1"}, "coupon_id": {"S": c},
                "user_id": {"S": f"u{i}"}, "grant_id": {"S": f"{c}-0-{i + 1}"},
            })
    ddb.put_item(TableName=os.environ["COUPONS_TABLE"], Item={
        "pk": {"S": f"COUPON#{coupon}"}, "sk": {"S": f"GRANT#{coupon}-0-9"}, "status": {"S": "REJECTED"},
    })

    coupons, rejections = ledger(coupon)

    assert sorted(holders(coupons)) == [(f"u{i}", f"{coupon}-0-{i + 1}") for i in range(3)]
    assert rejected_ids(rejections) == {f"{coupon}-0-9"}
