"""`make demo`'s third sale: a lottery (`mode: LOTTERY`), the fair sale for
the hottest coupons.

150 users register during a short window (each from an address of their
own); 30 of them register again, and every repeat answers the first
registration. The coupon published its seed's SHA-256 before anyone
registered; the demo records it from a user's `GET .../entries/me`. At the
draw instant the reconciler's schedule (one invocation, as the local
pump's schedule would) freezes the entries, draws the winners and hands
their grants to the issuer, through the same queue as a grab's; the pump
issues them and the notifier tells each winner (`CouponIssued`). Then every
user reads their result, and `couponctl verify-draw` recomputes the
winners from the revealed seed and the entries and compares them with the
coupon's holders and with the hash recorded before. The report says how
many entries, repeated registrations, winners, and how many were issued,
told and verified; oversell, duplicates and lost must be 0.
"""
import collections
import concurrent.futures
import json
import subprocess
import time
import zlib

from infra.harness.after_sale import notifications
from infra.harness.calls import ROOT, grab, grab_call
from infra.harness.ledger import ledger
from infra.harness.waves_sale import start_pumping
from infra.local import pump as pumpmod

USERS = 150
REPEATS = 30
STOCK = 40
WINDOW_SECONDS = 6
DRAW_SETTLE_MS = 10_000


def create(shards):
    now = int(time.time() * 1000)
    end = now + WINDOW_SECONDS * 1000
    definition = {
        "couponId": f"lottery-{now}",
        "name": "Lucky draw: 50 off",
        "amount": 5000,
        "totalStock": STOCK,
        "perUserLimit": 1,
        "grabStartMs": now - 1000,
        "grabEndMs": end,
        "validFromMs": now,
        "validUntilMs": now + 7 * 86_400_000,
        "shards": shards,
        "mode": "LOTTERY",
        "drawAtMs": end + DRAW_SETTLE_MS,
    }
    path = ROOT / ".local" / "demo-lottery-coupon.json"
    path.write_text(json.dumps(definition))
    subprocess.run([str(ROOT / "target" / "debug" / "couponctl"), "create", str(path)], check=True)
    return definition


def address(user):
    n = zlib.crc32(user.encode()) % 60_000
    return f"198.18.{n // 250}.{n % 250}"


def register(coupon_id, user):
    return grab_call("POST", f"/coupons/{coupon_id}/entries", user, body={},
                     headers={"x-forwarded-for": address(user)})


def result(coupon_id, user):
    return grab_call("GET", f"/coupons/{coupon_id}/entries/me", user)


def until(instant_ms):
    time.sleep(max(0.0, instant_ms / 1000 - time.time()) + 0.05)


def run(shards, concurrency):
    """The whole lottery; its report (`ok` says whether it kept the promise)."""
    definition = create(shards)
    coupon_id = definition["couponId"]
    users = [f"l-{i}" for i in range(USERS)]
    committed = result(coupon_id, users[0]).get("data", {}).get("seedHash")
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        first = list(pool.map(lambda u: register(coupon_id, u), users))
        again = list(pool.map(lambda u: register(coupon_id, u), users[:REPEATS]))
    press = grab(coupon_id, users[0], "not-a-grab", address(users[0]))[3]
    registered = [r for r in first if r.get("code") == "SUCCESS"]
    replayed = [r for r in again if r.get("code") == "SUCCESS" and r["data"].get("replayed")]
    same_time = all(
        a["data"]["registeredAtMs"] == f["data"]["registeredAtMs"]
        for f, a in zip(first[:REPEATS], again) if a.get("code") == "SUCCESS"
    )

    until(definition["drawAtMs"])
    pump, stop, thread = start_pumping()
    draw = pumpmod.invoke("reconciler", {})
    figures = next((c for c in draw.get("coupons", []) if c["couponId"] == coupon_id), {})
    time.sleep(1.0)
    stop.set()
    thread.join()
    pump.drain()
    reconcile = pumpmod.invoke("reconciler", {})
    figures = next((c for c in reconcile.get("coupons", []) if c["couponId"] == coupon_id), figures)

    items, rejected = ledger(coupon_id)
    holders = collections.Counter(i["user_id"]["S"] for i in items)
    # The user-coupons change stream through the notifier to the bus.
    pumpmod.StreamPump().drain()
    heard = notifications(coupon_id)["events"]
    told = sum(1 for kind in heard.values() if kind == "CouponIssued")
    standings = collections.Counter(result(coupon_id, u).get("data", {}).get("status") for u in users)
    verify = subprocess.run(
        [str(ROOT / "target" / "debug" / "couponctl"), "verify-draw", coupon_id, committed or ""],
        capture_output=True, text=True,
    )
    report = {
        "couponId": coupon_id,
        "stock": STOCK,
        "seedHash": committed,
        "entries": len(registered),
        "repeatedRegistrations": len(again),
        "repeatsAnsweredAsTheFirst": len(replayed),
        "pressOnALottery": (press.get("data") or {}).get("reason"),
        "winners": standings.get("WON", 0),
        "notDrawn": standings.get("NOT_DRAWN", 0),
        "issued": len(items),
        "told": told,
        "oversell": max(0, len(items) - STOCK),
        "duplicates": sum(n - 1 for n in holders.values() if n > 1),
        "lost": max(0, standings.get("WON", 0) - len(holders)),
        "rejected": len(rejected),
        "drift": figures.get("drift"),
        "verified": verify.returncode == 0,
        "verifyOutput": verify.stdout.strip().splitlines()[-1:] + verify.stderr.strip().splitlines()[-1:],
    }
    report["ok"] = (all(report[k] == 0 for k in ("oversell", "duplicates", "lost", "rejected", "drift"))
                    and report["entries"] == USERS
                    and report["repeatsAnsweredAsTheFirst"] == REPEATS and same_time
                    and report["pressOnALottery"] == "LOTTERY"
                    and report["winners"] == report["issued"] == report["told"] == STOCK
                    and report["notDrawn"] == USERS - STOCK
                    and report["verified"])
    return report


def show(report):
    print(f"  {report['entries']} entries, {report['repeatedRegistrations']} repeated registrations "
          f"(each answered as the first: {report['repeatsAnsweredAsTheFirst']}); a press heard "
          f"{report['pressOnALottery']}")
    print(f"  drawn: {report['winners']} winners of {report['entries']} for {report['stock']} units, "
          f"{report['notDrawn']} not drawn; issued {report['issued']}, told {report['told']}")
    print(f"  seed committed as {report['seedHash']}; couponctl verify-draw: "
          f"{'agrees' if report['verified'] else 'DISAGREES'}")
    print(f"  oversell {report['oversell']}, duplicates {report['duplicates']}, lost {report['lost']}, "
          f"drift {report['drift']}")
