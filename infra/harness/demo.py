#!/usr/bin/env python3
"""The main job: a whole flash sale, locally, end to end.

1. Serves the functions with `cargo lambda watch` (unless already served).
2. Creates a coupon (`couponctl`), open from now.
3. Thousands of simulated users press "grab" through HTTP, concurrently, with
   the retries real apps make (same request id) and some second presses.
4. Issues grants through the local event pump (infra/local/pump.py) while the
   sale runs, drains what is left, and runs the reconciler.
5. The order service spends a share of the issued coupons through the API
   (`PUT /redemptions/{orderId}`), some orders twice (a retry) and some
   coupons by two orders at once, and gives a share back
   (`POST /redemptions/{orderId}/return`).
6. Tells the users: the user-coupons change stream goes through the
   notifier (infra/local/pump.py reads it as Lambda would) to the event bus; a
   rule takes every event to a local tap queue, another the winners'
   `CouponIssued` to the push service's queue.
7. Checks the outcome against DynamoDB itself and writes the report to
   target/demo/report.json: requests, winners, issued, stock, oversell,
   duplicates, lost, redeemed, returned, double spends, notifications (one
   per transition, repeats dropped by event id), pushed, latency
   percentiles, throughput; and target/demo/report.html, the same as
   charts over time (infra/harness/report.py).
8. A second coupon sells in three release waves 8 s apart
   (infra/harness/waves_sale.py): the report per wave says what it
   released, what was won and issued in it, and what rolled over.
9. A third coupon is a lottery (infra/harness/lottery_sale.py): entries
   (some registered twice), the draw at its instant, the winners issued
   and told, and `couponctl verify-draw` recomputing them from the revealed
   seed.

Exits non-zero if anything was oversold, duplicated, lost or spent twice,
or a transition was not told exactly once.
"""
import argparse
import collections
import concurrent.futures
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

from infra.harness import report as reportmod
from infra.harness import lottery_sale, waves_sale
from infra.harness.after_sale import notifications, orders
from infra.harness.calls import ROOT, admin_get, grab, serve
from infra.harness.ledger import holders, ledger
from infra.local import pump as pumpmod
from infra.local.settings import aws

def create_coupon(args):
    now = int(time.time() * 1000)
    coupon_id = f"sale-{now}"
    definition = {
        "couponId": coupon_id,
        "name": "Flash sale: 20 off orders over 199",
        "amount": 2000,
        "totalStock": args.stock,
        "perUserLimit": 1,
        "grabStartMs": now - 1000,
        "grabEndMs": now + 3_600_000,
        "validFromMs": now,
        "validUntilMs": now + 7 * 86_400_000,
        "shards": args.shards,
        "ratePerSec": 0,
    }
    path = ROOT / ".local" / "demo-coupon.json"
    path.write_text(json.dumps(definition))
    subprocess.run([str(ROOT / "target" / "debug" / "couponctl"), "create", str(path)], check=True)
    return definition


class Sampler(threading.Thread):
    """The coupon's live figures (remaining, issued, pending) every half
    second through the admin API, for the report's charts; and how long the
    local AWS endpoint takes to answer a small call meanwhile (the grant
    queue's depth), the stand-in's share of a win's time."""

    def __init__(self, coupon_id, started):
        super().__init__(daemon=True)
        self.coupon_id, self.started = coupon_id, started
        self.samples = []
        self.aws_ms = []
        self.sqs = aws("sqs")
        self.stop = threading.Event()

    def sample(self):
        answer = admin_get(f"/admin/coupons/{self.coupon_id}")
        f = (answer.get("data") or {}).get("figures")
        if f:
            self.samples.append((time.perf_counter() - self.started, f["remaining"], f["issued"], f["pending"]))

    def probe(self):
        t0 = time.perf_counter()
        try:
            self.sqs.get_queue_attributes(QueueUrl=os.environ["GRANT_QUEUE_URL"],
                                          AttributeNames=["ApproximateNumberOfMessages"])
        except Exception:  # a probe that fails measures nothing
            return
        self.aws_ms.append((time.perf_counter() - t0) * 1000)

    def run(self):
        while not self.stop.wait(0.5):
            self.sample()
            self.probe()


def presses(args):
    """Every user presses once; some retry the same press (a timeout on a
    bad network), some press again later (a new request id)."""
    rng = random.Random(args.seed)
    out = []
    for i in range(args.users):
        user, ip = f"demo-user-{i}", f"198.18.{i // 250}.{i % 250}"
        out.append((user, f"{user}-press-1", ip))
        if rng.random() < 0.15:
            out.append((user, f"{user}-press-1", ip))
        if rng.random() < 0.05:
            out.append((user, f"{user}-press-2", ip))
    rng.shuffle(out)
    return out


def progress(done, total, started, width=40):
    filled = int(width * done / total)
    rate = done / max(time.perf_counter() - started, 1e-9)
    sys.stderr.write(f"\r  grabs [{'#' * filled}{'.' * (width - filled)}] {done}/{total}  {rate:,.0f}/s ")
    sys.stderr.flush()


SUMMARY_KEYS = [
    "requests", "winners", "issued", "stock", "oversell", "duplicates", "lost", "rejected",
    "redeemed", "returned", "double_spends", "used_in_dynamodb", "notifications", "pushed",
    "p50_ms", "p90_ms", "p99_ms", "max_ms", "throughput_rps", "grab_seconds", "drain_seconds",
]


class Sold:
    """The sale as the clients saw it, and the issuance that ran beside it."""

    def __init__(self, results, timeline, elapsed, pump, stream, sampler):
        self.results, self.timeline, self.elapsed = results, timeline, elapsed
        self.pump, self.stream, self.sampler = pump, stream, sampler


def sell(coupon_id, work, concurrency):
    """Every press in `work`, `concurrency` at a time, with issuance running
    during the sale as the SQS event source mapping does."""
    pump = pumpmod.Pump()
    stream = pumpmod.StreamPump()
    stop = threading.Event()

    def pump_while_selling():
        while not stop.is_set():
            if not (pump.once() + stream.once()):
                time.sleep(0.05)

    pumping = threading.Thread(target=pump_while_selling, daemon=True)
    pumping.start()
    results = []
    timeline = []  # (seconds since the start, code, latency ms)
    started = time.perf_counter()
    sampler = Sampler(coupon_id, started)
    sampler.start()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        futures = [pool.submit(grab, coupon_id, u, r, ip) for u, r, ip in work]
        for n, f in enumerate(concurrent.futures.as_completed(futures), 1):
            results.append(f.result())
            timeline.append((time.perf_counter() - started, results[-1][3].get("code"), results[-1][4]))
            if n % 50 == 0 or n == len(futures):
                progress(n, len(futures), started)
    elapsed = time.perf_counter() - started
    sys.stderr.write("\n")
    stop.set()
    pumping.join()
    return Sold(results, timeline, elapsed, pump, stream, sampler)


def settle(coupon_id, sold):
    """Drains the rest of issuance and runs the reconciler once: its report
    and this coupon's figures in it, with how long each took."""
    t1 = time.perf_counter()
    sold.pump.drain()
    drain = time.perf_counter() - t1
    sold.sampler.stop.set()
    sold.sampler.join()
    sold.sampler.sample()
    t2 = time.perf_counter()
    reconcile = pumpmod.invoke("reconciler", {})
    timings = {"drain_seconds": round(drain, 2), "reconcile_seconds": round(time.perf_counter() - t2, 2)}
    figures = next((c for c in reconcile.get("coupons", []) if c["couponId"] == coupon_id), {})
    return reconcile, figures, timings


def tally(args, definition, sold, reconcile, figures, spending, told):
    """The report: the sale's figures from the clients' answers and from
    what DynamoDB holds, judged in `verdict`."""
    coupon_id = definition["couponId"]
    results = sold.results
    codes = collections.Counter(p.get("code") for _, _, _, p, _ in results)
    winners = {}
    for user, _, _, payload, _ in results:
        if payload.get("code") == "SUCCESS":
            winners.setdefault(payload["data"]["grantId"], user)
    items, rejected = ledger(coupon_id)
    issued_ids = [i["grant_id"]["S"] for i in items]
    per_user = collections.Counter(i["user_id"]["S"] for i in items)
    duplicates = sum(max(0, n - definition["perUserLimit"]) for n in per_user.values()) + (
        len(issued_ids) - len(set(issued_ids))
    )
    latencies = sorted(ms for *_, ms in results)
    pct = lambda values, p: round(reportmod.percentile(sorted(values), p), 2) if values else None
    handler = [r.server_ms for r in results if r.server_ms is not None]
    emulator = [max(0.0, r.last_ms - r.server_ms) for r in results if r.server_ms is not None]
    win_handler = [r.server_ms for r in results if r.server_ms is not None and r.payload.get("code") == "SUCCESS"]
    return {
        "couponId": coupon_id,
        "users": args.users,
        "requests": len(results),
        "winners": len(winners),
        "issued": len(items),
        "stock": args.stock,
        "oversell": max(0, len(items) - args.stock),
        "duplicates": duplicates,
        "lost": len(set(winners) - set(issued_ids)),
        "rejected": len(rejected),
        "transport_errors": codes.get("TRANSPORT_ERROR", 0),
        "codes": dict(codes),
        # What the clients heard before their final answers (docs/api.md's
        # retries of the same request id): how many presses needed one, and
        # each retryable answer by code.
        "presses_retried": sum(1 for r in results if r.retried),
        "retried_answers": dict(collections.Counter(c for r in results for c in r.retried)),
        "busy_answers": sum(r.retried.count("BUSY") + (r.payload.get("code") == "BUSY") for r in results),
        "p50_ms": round(reportmod.percentile(latencies, 50), 2),
        "p90_ms": round(reportmod.percentile(latencies, 90), 2),
        "p99_ms": round(reportmod.percentile(latencies, 99), 2),
        "max_ms": round(latencies[-1], 2) if latencies else 0,
        # Where a press's time went (each answer's last attempt): the grab
        # handler's own time (Server-Timing: its Redis and AWS calls), the
        # rest of what the client measured (locally: waiting for one of the
        # Lambda emulator's LAMBDA_CONCURRENCY instances, and HTTP), and how
        # long the local AWS endpoint took for a small call meanwhile.
        "latency_parts": {
            "handler_p50_ms": pct(handler, 50), "handler_p99_ms": pct(handler, 99),
            "win_handler_p50_ms": pct(win_handler, 50), "win_handler_p99_ms": pct(win_handler, 99),
            "emulator_wait_p50_ms": pct(emulator, 50), "emulator_wait_p99_ms": pct(emulator, 99),
            "local_aws_p50_ms": pct(sold.sampler.aws_ms, 50), "local_aws_p99_ms": pct(sold.sampler.aws_ms, 99),
            "lambda_concurrency": int(os.environ.get("LAMBDA_CONCURRENCY", "4")),
            "clients": args.concurrency,
        },
        "throughput_rps": round(len(results) / sold.elapsed, 1),
        "grab_seconds": round(sold.elapsed, 2),
        "issuer_deliveries": sold.pump.delivered,
        "redeemed": spending["redeemed"],
        "returned": spending["returned"],
        "double_spends": spending["double_spends"],
        "returns_refused": spending["returns_refused"],
        "notifications": len(told["events"]),
        "notifications_by_type": dict(collections.Counter(told["events"].values())),
        "notification_repeats": told["repeats"],
        "pushed": told["pushed"],
        "notifier_gave_up": sold.stream.given_up,
        "used_in_dynamodb": sum(1 for i in items if i.get("status", {}).get("S") == "USED"),
        "order_answers": spending["order_answers"],
        "reconcile": figures,
        "dlq_depth": reconcile.get("dlqDepth"),
    }


def verdict(report, args):
    """The promise over the whole sale: exactly the stock, once each,
    nothing lost, the books balanced, no coupon spent twice, and every
    transition told exactly once (after dropping repeats by id), every
    winner's news pushed."""
    ok = all(report[k] == 0 for k in ("oversell", "duplicates", "lost", "double_spends", "returns_refused"))
    ok = ok and report["reconcile"].get("drift") == 0
    ok = ok and report["winners"] == min(args.stock, args.users)
    ok = ok and report["used_in_dynamodb"] == report["redeemed"] - report["returned"]
    transitions = report["issued"] + report["redeemed"] + report["returned"]
    return ok and report["notifications"] == transitions and report["pushed"] == report["issued"]


def show(report, sold, args, ok):
    """The figures on the terminal, and the page with the charts."""
    figures = report["reconcile"]
    print()
    for key in ["requests", "winners", "issued", "stock", "oversell", "duplicates", "lost",
                "redeemed", "returned", "double_spends", "used_in_dynamodb", "notifications", "pushed",
                "presses_retried", "busy_answers",
                "p50_ms", "p99_ms", "throughput_rps", "startup_seconds", "grab_seconds", "drain_seconds"]:
        print(f"  {key:<18}{report[key]}")
    parts = report["latency_parts"]
    print(f"  {'where time went':<18}the grab handler p50 {parts['handler_p50_ms']} / p99 {parts['handler_p99_ms']} ms "
          f"(a win p50 {parts['win_handler_p50_ms']} / p99 {parts['win_handler_p99_ms']} ms, its Redis and AWS calls);\n"
          f"  {'':<18}waiting for one of the local emulator's {parts['lambda_concurrency']} instances "
          f"({parts['clients']} clients) p50 {parts['emulator_wait_p50_ms']} / p99 {parts['emulator_wait_p99_ms']} ms;\n"
          f"  {'':<18}the local AWS endpoint (moto) answered a small call in p50 {parts['local_aws_p50_ms']} / "
          f"p99 {parts['local_aws_p99_ms']} ms meanwhile")
    print(f"  {'stock equation':<18}drift {figures.get('drift')} "
          f"(remaining {figures.get('remaining')}, issued {figures.get('issued')}, "
          f"pending {figures.get('pending')}, rejected {figures.get('rejected')})")
    print(f"\n  report: {(ROOT / 'target' / 'demo' / 'report.json').relative_to(ROOT)}")
    page = reportmod.write(
        ROOT / "target" / "demo" / "report.html",
        {k: report[k] for k in SUMMARY_KEYS if k in report},
        reportmod.timeline(sold.timeline, sold.sampler.samples),
        {
            "total": args.stock,
            "remaining": figures.get("remaining", 0),
            "issued": figures.get("issued", 0),
            "pending": figures.get("pending", 0),
            "rejected": figures.get("rejected", 0),
        },
        ok,
        title=f"Flash sale {report['couponId']}: {args.users} users, {args.stock} coupons, {args.shards} shards",
    )
    print(f"  charts: {page.relative_to(ROOT)}")
    print("  OK: exactly the stock, once each, nothing lost, no coupon spent twice, every change told" if ok
          else "  FAILED: see the report")


def main():
    parser = argparse.ArgumentParser(description="Run a whole flash sale locally.")
    parser.add_argument("--users", type=int, default=4000)
    parser.add_argument("--stock", type=int, default=500)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seed", type=int, default=20261130)
    args = parser.parse_args()
    (ROOT / ".local").mkdir(exist_ok=True)

    print(f"flash sale: {args.users} users, {args.stock} coupons, {args.shards} shards")
    t0 = time.perf_counter()
    server = serve()
    startup = time.perf_counter() - t0
    try:
        definition = create_coupon(args)
        coupon_id = definition["couponId"]
        work = presses(args)
        print(f"  coupon {coupon_id}; {len(work)} presses from {args.users} users")
        sold = sell(coupon_id, work, args.concurrency)
        print(f"  answers: {dict(collections.Counter(p.get('code') for _, _, _, p, _ in sold.results))}")

        print("  draining the rest of issuance through the event pump ...")
        reconcile, figures, timings = settle(coupon_id, sold)

        print("  the order service spends a share of the coupons and gives some back ...")
        held = holders(ledger(coupon_id)[0])
        spending = orders(coupon_id, held, random.Random(args.seed), args.concurrency)

        print("  telling the users: the change stream through the notifier to the event bus ...")
        sold.stream.drain()
        told = notifications(coupon_id)

        report = tally(args, definition, sold, reconcile, figures, spending, told)
        report.update(timings, startup_seconds=round(startup, 2))
        out = ROOT / "target" / "demo" / "report.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
        ok = verdict(report, args)
        show(report, sold, args, ok)

        print("\nrelease waves: a second coupon, in three waves 8 s apart ...")
        waved = waves_sale.run(args.shards, args.concurrency)
        waves_sale.show(waved)
        report["waves_sale"] = waved
        out.write_text(json.dumps(report, indent=2) + "\n")
        print("  OK: no unit before its wave, each once, nothing lost" if waved["ok"]
              else "  FAILED: see waves_sale in the report")

        print("\na lottery: registrations, a verifiable draw, the winners issued and told ...")
        drawn = lottery_sale.run(args.shards, args.concurrency)
        lottery_sale.show(drawn)
        report["lottery_sale"] = drawn
        out.write_text(json.dumps(report, indent=2) + "\n")
        print("  OK: exactly the stock drawn, each winner once, the draw verified" if drawn["ok"]
              else "  FAILED: see lottery_sale in the report")
        return 0 if ok and waved["ok"] and drawn["ok"] else 1
    finally:
        if server is not None:
            os.killpg(server.pid, signal.SIGTERM)


if __name__ == "__main__":
    sys.exit(main())
