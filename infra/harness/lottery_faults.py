"""The fault suite on a lottery (`<fault>_lottery`, chaos.py runs them):
users register during a short window, the fault strikes (Redis loses
everything at 30% of the registrations; or every grant is delivered to the
issuer twice), the reconciler's schedule draws at the draw instant, and the
draw is judged as a sale is: no oversell, no duplicate, every registered
user in the draw (`lost` counts one that is not, and a winner without a
coupon), `couponctl verify-draw` agreeing with the holders, and every
winner issued. Availability is the registrations' (BUSY while the coupon
is rebuilt)."""

import collections
import concurrent.futures
import json
import os
import subprocess
import threading
import time

from infra.harness.ledger import holders, ledger, rejected_ids
from infra.harness.sale import ROOT, Issuance, call, wall_clock
from infra.local import pump as pumpmod
from infra.local.settings import aws

LOTTERY = "_lottery"
RETRYABLE = {"BUSY", "TRANSPORT_ERROR", "GATEWAY_ERROR"}
WINDOW_SECONDS = 8
DRAW_SETTLE_MS = 10_000


def entries_of(coupon, shards):
    """The users DynamoDB holds entries of (every shard's partition)."""
    ddb, users = aws("dynamodb"), set()
    for shard in range(shards):
        for page in ddb.get_paginator("query").paginate(
            TableName=os.environ["COUPONS_TABLE"],
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": f"ENTRIES#{coupon}#{shard}"}},
            ConsistentRead=True,
        ):
            users |= {i["user_id"]["S"] for i in page["Items"] if "user_id" in i}
    return users


def standing(coupon, user):
    status, body = call("GET", f"/lambda-url/grab/coupons/{coupon}/entries/me", headers={"x-user-id": user})
    try:
        return json.loads(body).get("data") or {}
    except json.JSONDecodeError:
        return {}


def lottery_scenario(name, rig, short, seed):
    """One lottery under the fault in `name` (`redis_flush_lottery`,
    `duplicate_delivery_lottery`)."""
    from infra.harness.scenarios import availability  # the same measure as a sale's

    fault = name.removesuffix(LOTTERY)
    users = 120 if short else 300
    stock, shards = (40 if short else 100), 2
    now = int(time.time() * 1000)
    coupon = f"chaos-{name.replace('_', '-')}-{now}"
    end = now + WINDOW_SECONDS * 1000
    definition = {
        "couponId": coupon, "name": f"chaos {name}", "amount": 500, "totalStock": stock, "perUserLimit": 1,
        "grabStartMs": now - 1000, "grabEndMs": end, "validFromMs": now, "validUntilMs": now + 86_400_000,
        "shards": shards, "mode": "LOTTERY", "drawAtMs": end + DRAW_SETTLE_MS,
    }
    # As an operator's script does: a retryable answer (Redis still coming
    # back from the scenario before) is retried.
    for _ in range(20):
        status, body = call("POST", "/lambda-url/admin/admin/coupons", definition)
        if status not in (0, 429, 500, 502, 503):
            break
        time.sleep(0.5)
    if status != 200:
        raise SystemExit(f"{name}: create failed: {status} {body[:300]!r}")
    issuance = Issuance(duplicate=fault == "duplicate_delivery")
    codes, answers, registered, injected, healed = collections.Counter(), [], set(), [], []
    lock = threading.Lock()
    began = time.monotonic()
    flush_at = int(users * 0.3) if fault == "redis_flush" else None

    def note(what, ends=False):
        injected.append({"atSecond": round(time.monotonic() - began, 2), "at": wall_clock(), "what": what})
        if ends:
            healed.append(time.monotonic())

    def register(i):
        user = f"{name}-u{i}"
        if i == flush_at:
            rig["redis"].cli("FLUSHALL")
            note("Redis FLUSHALL at 30% of the registrations", ends=True)
        headers = {"x-user-id": user, "x-forwarded-for": f"198.18.{i // 250}.{i % 250}"}
        for _ in range(80):
            sent = time.monotonic()
            status, body = call("POST", f"/lambda-url/grab/coupons/{coupon}/entries", {}, headers)
            try:
                code = json.loads(body).get("code") if body else None
            except json.JSONDecodeError:
                code = None
            code = code or ("TRANSPORT_ERROR" if status == 0 else "GATEWAY_ERROR")
            with lock:
                codes[code] += 1
                answers.append((time.monotonic(), sent, code))
                if code == "SUCCESS":
                    registered.add(user)
            if code not in RETRYABLE:
                return
            time.sleep(0.25)

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(register, range(users)))
    note(f"{len(registered)} registered; the draw is at its instant")
    time.sleep(max(0.0, definition["drawAtMs"] / 1000 - time.time()) + 3)
    figures = issuance.settle(coupon)
    drawn = standing(coupon, f"{name}-u0").get("seed")
    for _ in range(20):
        if drawn:
            break
        # Not drawn yet (the coupon's rebuild took the passes before):
        # the schedule's next passes, by hand.
        time.sleep(1)
        report = pumpmod.invoke("reconciler", {})
        figures = next((c for c in report.get("coupons", []) if c["couponId"] == coupon), figures)
        drawn = standing(coupon, f"{name}-u0").get("seed")
    issuance.pump.drain(quiet_seconds=0.5, deadline_seconds=60)
    report = pumpmod.invoke("reconciler", {})
    figures = next((c for c in report.get("coupons", []) if c["couponId"] == coupon), figures)

    coupons, rejections = ledger(coupon)
    held = holders(coupons)
    per_user = collections.Counter(u for u, _ in held)
    ids = [g for _, g in held]
    won = [u for u in sorted(registered) if standing(coupon, u).get("status") == "WON"]
    verify = subprocess.run([str(ROOT / "target" / "debug" / "couponctl"), "verify-draw", coupon],
                            capture_output=True, text=True)
    in_draw = entries_of(coupon, shards)
    result = {
        "coupon": coupon,
        "stock": stock,
        "entries": len(in_draw),
        "winners": len(won),
        "issued": len(held),
        "oversell": max(0, len(held) - stock),
        "duplicates": sum(n - 1 for n in per_user.values() if n > 1) + len(ids) - len(set(ids)),
        "lost": len(registered - in_draw) + sum(1 for u in won if u not in per_user)
        + (0 if verify.returncode == 0 else 1),
        "rejected_after_success": len(rejected_ids(rejections)),
        "unsold": max(0, min(stock, len(in_draw)) - len(held)),
        "early": 0,
        "drawn": bool(drawn),
        "verified": verify.returncode == 0,
        "answers": dict(codes),
        "drift": figures.get("drift"),
        "injected": injected,
        "repairRequests": issuance.pump.repairs,
    }
    if not drawn:
        result["lost"] += 1
    result.update(availability(answers, healed[0] if healed else None, began))
    return result
