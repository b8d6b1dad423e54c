"""`make demo`'s second sale: one coupon released in three waves (整点抢券)
with rollover, reminders before each wave, and the report per wave.

The waves come 8 s apart. A few users press before the first and hear
BETWEEN_WAVES with its instant; the first wave meets less demand than it
has units, so what it leaves rolls over into the second; the second and
third meet a crowd. Issuance runs beside the sale, as the SQS event source
mapping does. Per wave the report says the units it released, the units
won in it (from DynamoDB's coupons, by the instant each was granted), how
many of them are issued, what rolled over into the next wave (or was
left at the end), and how many subscribers heard `CouponSaleStarting` for
it on the bus (the reconciler's schedule sends them; here it runs once
before each wave, as the local pump's schedule would). The sale is judged
as the first one is, and on two more figures: `early`, a unit won before
the wave that released it, must be 0, and every subscriber must have
heard of every wave once.
"""
import collections
import concurrent.futures
import json
import subprocess
import threading
import time
import zlib

from infra.harness.after_sale import notifications
from infra.harness.calls import ROOT, grab, wallet_call
from infra.harness.ledger import early, ledger
from infra.local import pump as pumpmod

GAP_SECONDS = 8.0
UNITS = [60, 60, 60]


def create(shards):
    """The three-wave coupon, created with couponctl; its waves as
    `[(atMs, units), ...]`."""
    now = int(time.time() * 1000)
    waves = [(now + int((8 + k * GAP_SECONDS) * 1000), units) for k, units in enumerate(UNITS)]
    definition = {
        "couponId": f"waves-{now}",
        "name": "On the hour: 10 off, three waves",
        "amount": 1000,
        "totalStock": sum(UNITS),
        "perUserLimit": 1,
        "grabStartMs": now - 1000,
        "grabEndMs": now + 3_600_000,
        "validFromMs": now,
        "validUntilMs": now + 7 * 86_400_000,
        "shards": shards,
        "waves": [{"atMs": at, "units": units} for at, units in waves],
        "rollover": True,
    }
    path = ROOT / ".local" / "demo-waves-coupon.json"
    path.write_text(json.dumps(definition))
    subprocess.run([str(ROOT / "target" / "debug" / "couponctl"), "create", str(path)], check=True)
    return definition, waves


def until(instant_ms):
    time.sleep(max(0.0, instant_ms / 1000 - time.time()) + 0.02)


def press_all(coupon_id, people, label, concurrency):
    """Each of `people` presses once (request id `<user>-<label>`), each
    from an address of their own (the IP rules are not what this shows)."""
    def press(user):
        n = zlib.crc32(user.encode()) % 60_000
        return grab(coupon_id, user, f"{user}-{label}", f"198.19.{n // 250}.{n % 250}")

    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(press, people))


def subscribe(coupon_id, people):
    """`people` ask to be reminded; how many were answered SUCCESS."""
    answers = [wallet_call("PUT", f"/me/reminders/{coupon_id}", u) for u in people]
    return sum(1 for a in answers if a.get("code") == "SUCCESS")


def schedule_pass(passes):
    """One reconciler run in a thread of its own (the schedule), its
    reminders report kept in `passes`."""
    def run():
        passes.append(pumpmod.invoke("reconciler", {}).get("reminders"))
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def per_wave(waves, items, told, reminded):
    """Released, won, issued, rolled over and reminded, for each wave."""
    granted = sorted((int(i["granted_at_ms"]["N"]), i["grant_id"]["S"]) for i in items)
    rows, carried = [], 0
    for k, (at, units) in enumerate(waves):
        end = waves[k + 1][0] if k + 1 < len(waves) else float("inf")
        won = [g for t, g in granted if at <= t < end]
        sellable = units + carried
        carried = max(0, sellable - len(won))
        rows.append({
            "wave": k + 1, "atMs": at, "released": units, "rolledIn": sellable - units,
            "reminded": reminded.get(at, 0),
            "won": len(won), "issued": sum(1 for g in won if g in told),
            "rolledOver" if k + 1 < len(waves) else "leftAtEnd": carried,
        })
    return rows


def start_pumping():
    """Issuance beside a sale, as the SQS event source mapping runs it: a
    pump in a thread of its own until `stop` is set; `(pump, stop, thread)`."""
    pump, stop = pumpmod.Pump(), threading.Event()

    def pumping():
        while not stop.is_set():
            if not pump.once():
                time.sleep(0.05)

    thread = threading.Thread(target=pumping, daemon=True)
    thread.start()
    return pump, stop, thread


def run(shards, concurrency):
    """The whole waved sale; its report (`ok` says whether it kept the
    promise)."""
    definition, waves = create(shards)
    coupon_id = definition["couponId"]
    pump, stop, thread = start_pumping()
    results = []
    # 30 users ask to be reminded; the schedule runs before the first wave
    # and as each wave opens (the next one is then within the lead).
    subscribers = [f"w-early-{i}" for i in range(20)] + [f"w1-{i}" for i in range(10)]
    subscribed = subscribe(coupon_id, subscribers)
    passes = []
    schedules = [schedule_pass(passes)]
    # Before the first wave; then a thin first wave, and crowds for the rest.
    results += press_all(coupon_id, [f"w-early-{i}" for i in range(20)], "early", concurrency)
    crowds = [[f"w1-{i}" for i in range(40)],
              [f"w-early-{i}" for i in range(20)] + [f"w2-{i}" for i in range(130)],
              [f"w3-{i}" for i in range(150)]]
    heard_between = []
    for k, ((at, _), people) in enumerate(zip(waves, crowds)):
        until(at)
        if k + 1 < len(waves):
            schedules.append(schedule_pass(passes))
        results += press_all(coupon_id, people, f"wave-{k + 1}", concurrency)
    for *_, payload, _ in results:
        if (payload.get("data") or {}).get("reason") == "BETWEEN_WAVES":
            heard_between.append(payload["data"].get("nextWaveAtMs"))
    stop.set()
    thread.join()
    for schedule in schedules:
        schedule.join()
    pump.drain()
    reconcile = pumpmod.invoke("reconciler", {})
    figures = next((c for c in reconcile.get("coupons", []) if c["couponId"] == coupon_id), {})
    items, rejected = ledger(coupon_id)
    heard = notifications(coupon_id)["events"]
    reminded = collections.Counter(
        int(event_id.rsplit("/", 1)[1]) for event_id, kind in heard.items() if kind == "CouponSaleStarting"
    )
    told = {p["data"]["grantId"]: u for u, _, _, p, _ in results if p.get("code") == "SUCCESS"}
    issued = {i["grant_id"]["S"] for i in items}
    per_user = collections.Counter(i["user_id"]["S"] for i in items)
    report = {
        "couponId": coupon_id,
        "stock": definition["totalStock"],
        "requests": len(results),
        "codes": dict(collections.Counter(p.get("code") for *_, p, _ in results)),
        "betweenWaves": len(heard_between),
        "winners": len(told),
        "issued": len(items),
        "oversell": max(0, len(items) - definition["totalStock"]),
        "duplicates": sum(max(0, n - 1) for n in per_user.values()) + len(items) - len(issued),
        "lost": len(set(told) - issued),
        "rejected": len(rejected),
        "early": early(waves, items),
        "drift": figures.get("drift"),
        "subscribers": subscribed,
        "schedulePasses": passes,
        "waves": per_wave(waves, items, issued, reminded),
    }
    report["ok"] = (all(report[k] == 0 for k in ("oversell", "duplicates", "lost", "early", "drift"))
                    and report["issued"] == report["winners"] == report["stock"]
                    and report["betweenWaves"] > 0
                    and subscribed == len(subscribers)
                    and all(w["reminded"] == subscribed for w in report["waves"])
                    and all(w["won"] <= w["released"] + w["rolledIn"] for w in report["waves"]))
    return report


def show(report):
    print(f"  three waves, {report['stock']} units: {report['codes']}")
    print(f"  {report['subscribers']} users asked to be reminded")
    print(f"  {'wave':<6}{'reminded':>9}{'released':>9}{'rolled in':>10}{'won':>6}{'issued':>8}{'rolled over':>12}")
    for w in report["waves"]:
        over = w.get("rolledOver", w.get("leftAtEnd"))
        print(f"  {w['wave']:<6}{w['reminded']:>9}{w['released']:>9}{w['rolledIn']:>10}{w['won']:>6}{w['issued']:>8}"
              f"{over:>12}")
    print(f"  {report['betweenWaves']} presses heard BETWEEN_WAVES; early {report['early']}, "
          f"oversell {report['oversell']}, duplicates {report['duplicates']}, lost {report['lost']}, "
          f"drift {report['drift']}")
