"""After the demo's sale: the order service spends a share of the coupons
and gives some back (`orders`), and what the users were told about it all
(`notifications`, read from the bus's queues as its consumers read them)."""

import collections
import concurrent.futures
import json
import os

from infra.harness.calls import order_call
from infra.local.settings import aws


def orders(coupon_id, held, rng, concurrency):
    """Spends a fifth of the held coupons, each by one order (retried once,
    as a client that timed out would) or, for one in five, by two orders at
    once; then gives a quarter of the spent ones back. Returns the figures
    and the orders that were told SUCCESS, per grant."""
    chosen = rng.sample(held, len(held) // 5)
    work = []
    for n, (user, grant) in enumerate(chosen):
        racers = 2 if n % 5 == 0 else 1
        for r in range(racers):
            work.append((user, grant, f"order-{coupon_id}-{n}-{r}"))
    spent = collections.defaultdict(set)
    codes = collections.Counter()

    def redeem(user, grant, order):
        answers = [order_call("PUT", f"/redemptions/{order}", {"userId": user, "grantId": grant}) for _ in range(2)]
        return grant, order, answers

    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        for grant, order, answers in pool.map(lambda w: redeem(*w), work):
            for a in answers:
                codes[a.get("code")] += 1
            if any(a.get("code") == "SUCCESS" for a in answers):
                spent[grant].add(order)
    returned = 0
    giving_back = list(spent.items())[: len(spent) // 4]
    for grant, orders_told in giving_back:
        order = next(iter(orders_told))
        user = next(u for u, g in chosen if g == grant)
        if order_call("POST", f"/redemptions/{order}/return", {"userId": user, "grantId": grant}).get("code") == "SUCCESS":
            returned += 1
    return {
        "redeemed": len(spent),
        "returned": returned,
        "returns_refused": len(giving_back) - returned,
        "double_spends": sum(1 for o in spent.values() if len(o) > 1),
        "order_answers": dict(codes),
    }


def notifications(coupon_id):
    """What consumers of the bus received for this coupon: every event (the
    demo's tap rule takes them all) by its stable id, with repeats dropped
    as a consumer must, and the winners' events the push service's rule
    delivered."""
    sqs = aws("sqs")

    def read(url):
        bodies = []
        while True:
            out = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
            messages = out.get("Messages", [])
            if not messages:
                return bodies
            for m in messages:
                bodies.append(json.loads(m["Body"]))
            sqs.delete_message_batch(
                QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)]
            )

    events, repeats = {}, 0
    for e in read(os.environ["EVENT_TAP_QUEUE_URL"]):
        if e["detail"]["couponId"] != coupon_id:
            continue
        if e["detail"]["eventId"] in events:
            repeats += 1
        events[e["detail"]["eventId"]] = e["detail-type"]
    pushed = {e["detail"]["eventId"] for e in read(os.environ["PUSH_QUEUE_URL"]) if e["detail"]["couponId"] == coupon_id}
    return {"events": events, "repeats": repeats, "pushed": len(pushed)}
