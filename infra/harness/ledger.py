"""What DynamoDB holds of one coupon, read as the harnesses judge a sale:
the users' coupons (through the `by-coupon` index) and the grants the
issuer rejected (`GRANT#<grantId>` in the coupon's partition). One reader
for `make demo` and `make chaos`, so both judge from the same facts."""
import os

from infra.local.settings import aws


def ledger(coupon_id):
    """`(coupons, rejections)`: every user coupon item of the coupon and
    every rejection item, as DynamoDB returns them."""
    ddb = aws("dynamodb")
    coupons, rejections = [], []
    for page in ddb.get_paginator("query").paginate(
        TableName=os.environ["USER_COUPONS_TABLE"],
        IndexName="by-coupon",
        KeyConditionExpression="coupon_id = :c",
        ExpressionAttributeValues={":c": {"S": coupon_id}},
    ):
        coupons += page["Items"]
    for page in ddb.get_paginator("query").paginate(
        TableName=os.environ["COUPONS_TABLE"],
        KeyConditionExpression="pk = :pk AND begins_with(sk, :g)",
        ExpressionAttributeValues={":pk": {"S": f"COUPON#{coupon_id}"}, ":g": {"S": "GRANT#"}},
    ):
        rejections += page["Items"]
    return coupons, rejections


def holders(coupons):
    """`(user, grantId)` of each user coupon item."""
    return [(i["user_id"]["S"], i["grant_id"]["S"]) for i in coupons]


def rejected_ids(rejections):
    """The grant ids of the rejection items."""
    return {i["sk"]["S"].removeprefix("GRANT#") for i in rejections}


def early(waves, coupons):
    """Units won before their wave's instant: with the coupons in the order
    they were granted, the k-th may not predate the wave that released the
    k-th unit (`waves`: `[(atMs, units), ...]` in time order; 0 without)."""
    granted = sorted(int(i["granted_at_ms"]["N"]) for i in coupons)
    opens = [at for at, units in waves for _ in range(units)]
    return sum(1 for k, at in enumerate(granted) if k < len(opens) and at < opens[k])
