#!/usr/bin/env python3
"""The main job: a whole flash sale, locally, end to end.

1. Serves the functions with `cargo lambda watch` (unless already served).
2. Creates a coupon (`couponctl`), open from now.
3. Thousands of simulated users press "grab" through HTTP, concurrently, with
   the retries real apps make (same request id) and some second presses.
4. Issues grants through the local event pump (infra/pump.py) while the
   sale runs, drains what is left, and runs the reconciler.
5. The order service spends a share of the issued coupons through the API
   (`PUT /redemptions/{orderId}`), some orders twice (a retry) and some
   coupons by two orders at once, and gives a share back
   (`POST /redemptions/{orderId}/return`).
6. Tells the users: the user-coupons change stream goes through the
   notifier (infra/pump.py reads it as Lambda would) to the event bus; a
   rule takes every event to a local tap queue, another the winners'
   `CouponIssued` to the push service's queue.
7. Checks the outcome against DynamoDB itself and writes the report to
   target/demo/report.json: requests, winners, issued, stock, oversell,
   duplicates, lost, redeemed, returned, double spends, notifications (one
   per transition, repeats dropped by event id), pushed, latency
   percentiles, throughput; and target/demo/report.html, the same as
   charts over time (infra/report.py).

Exits non-zero if anything was oversold, duplicated, lost or spent twice,
or a transition was not told exactly once.
"""
import argparse
import collections
import concurrent.futures
import http.client
import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import threading
import time
import pump as pumpmod
import report as reportmod
from ledger import holders, ledger
from localenv import aws, port

ROOT = pathlib.Path(__file__).resolve().parent.parent
HOST, PORT = "127.0.0.1", port("LAMBDA_PORT")


def listening():
    try:
        c = http.client.HTTPConnection(HOST, PORT, timeout=2)
        c.request("GET", "/lambda-url/grab/health")
        c.getresponse().read()
        return True
    except OSError:
        return False


def serve():
    """Starts infra/serve.sh unless something answers; returns the process or None."""
    if listening():
        return None
    log = open(ROOT / ".local" / "watch.log", "w")
    proc = subprocess.Popen(
        ["bash", str(ROOT / "infra" / "serve.sh")], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    for _ in range(600):
        if listening():
            return proc
        if proc.poll() is not None:
            sys.exit(f"cargo lambda watch exited; see {log.name}")
        time.sleep(0.5)
    sys.exit("cargo lambda watch did not start in 5 minutes")


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


class Client(threading.local):
    def conn(self):
        if not hasattr(self, "c"):
            self.c = http.client.HTTPConnection(HOST, PORT, timeout=30)
        return self.c


CLIENT = Client()


def grab(coupon_id, user, request_id, ip):
    body = json.dumps({"requestId": request_id})
    headers = {"content-type": "application/json", "x-user-id": user, "x-forwarded-for": ip}
    start = time.perf_counter()
    for attempt in range(3):
        try:
            c = CLIENT.conn()
            c.request("POST", f"/lambda-url/grab/coupons/{coupon_id}/grab", body=body, headers=headers)
            r = c.getresponse()
            payload = json.loads(r.read() or b"{}")
            return user, request_id, r.status, payload, (time.perf_counter() - start) * 1000
        except (OSError, http.client.HTTPException, json.JSONDecodeError):
            CLIENT.c = http.client.HTTPConnection(HOST, PORT, timeout=30)
    return user, request_id, 0, {"code": "TRANSPORT_ERROR"}, (time.perf_counter() - start) * 1000


def order_call(method, path, body):
    """One call of the order service (the IAM-authorized function; locally
    its explicit local identity)."""
    headers = {"content-type": "application/json", "x-admin-actor": "order-service"}
    for _ in range(3):
        try:
            c = CLIENT.conn()
            c.request(method, f"/lambda-url/admin{path}", body=json.dumps(body), headers=headers)
            r = c.getresponse()
            return json.loads(r.read() or b"{}")
        except (OSError, http.client.HTTPException, json.JSONDecodeError):
            CLIENT.c = http.client.HTTPConnection(HOST, PORT, timeout=30)
    return {"code": "TRANSPORT_ERROR"}


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


class Sampler(threading.Thread):
    """The coupon's live figures (remaining, issued, pending) every half
    second through the admin API, for the report's charts."""

    def __init__(self, coupon_id, started):
        super().__init__(daemon=True)
        self.coupon_id, self.started = coupon_id, started
        self.samples = []
        self.stop = threading.Event()

    def sample(self):
        answer = admin_get(f"/admin/coupons/{self.coupon_id}")
        f = (answer.get("data") or {}).get("figures")
        if f:
            self.samples.append((time.perf_counter() - self.started, f["remaining"], f["issued"], f["pending"]))

    def run(self):
        while not self.stop.wait(0.5):
            self.sample()


def admin_get(path):
    """An operator's read (locally the admin function's explicit local identity)."""
    try:
        c = http.client.HTTPConnection(HOST, PORT, timeout=30)
        c.request("GET", f"/lambda-url/admin{path}", headers={"x-admin-actor": "demo-report"})
        return json.loads(c.getresponse().read() or b"{}")
    except (OSError, http.client.HTTPException, json.JSONDecodeError):
        return {}


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

        # Issuance runs during the sale, as the SQS event source mapping does.
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
        with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
            futures = [pool.submit(grab, coupon_id, u, r, ip) for u, r, ip in work]
            for n, f in enumerate(concurrent.futures.as_completed(futures), 1):
                results.append(f.result())
                timeline.append((time.perf_counter() - started, results[-1][3].get("code"), results[-1][4]))
                if n % 50 == 0 or n == len(futures):
                    progress(n, len(futures), started)
        elapsed = time.perf_counter() - started
        sys.stderr.write("\n")

        codes = collections.Counter(p.get("code") for _, _, _, p, _ in results)
        winners = {}
        for user, _, _, payload, _ in results:
            if payload.get("code") == "SUCCESS":
                winners.setdefault(payload["data"]["grantId"], user)
        print(f"  answers: {dict(codes)}")

        print("  draining the rest of issuance through the event pump ...")
        t1 = time.perf_counter()
        stop.set()
        pumping.join()
        pump.drain()
        drain = time.perf_counter() - t1
        sampler.stop.set()
        sampler.join()
        sampler.sample()
        t2 = time.perf_counter()
        reconcile = pumpmod.invoke("reconciler", {})
        reconcile_seconds = time.perf_counter() - t2
        figures = next((c for c in reconcile.get("coupons", []) if c["couponId"] == coupon_id), {})

        print("  the order service spends a share of the coupons and gives some back ...")
        held = holders(ledger(coupon_id)[0])
        spending = orders(coupon_id, held, random.Random(args.seed), args.concurrency)

        print("  telling the users: the change stream through the notifier to the event bus ...")
        stream.drain()
        told = notifications(coupon_id)

        items, rejected = ledger(coupon_id)
        used_now = sum(1 for i in items if i.get("status", {}).get("S") == "USED")
        issued_ids = [i["grant_id"]["S"] for i in items]
        per_user = collections.Counter(i["user_id"]["S"] for i in items)
        duplicates = sum(max(0, n - definition["perUserLimit"]) for n in per_user.values()) + (
            len(issued_ids) - len(set(issued_ids))
        )
        issued = len(items)
        lost = len(set(winners) - set(issued_ids))
        latencies = sorted(ms for *_, ms in results)
        report = {
            "couponId": coupon_id,
            "users": args.users,
            "requests": len(results),
            "winners": len(winners),
            "issued": issued,
            "stock": args.stock,
            "oversell": max(0, issued - args.stock),
            "duplicates": duplicates,
            "lost": lost,
            "rejected": len(rejected),
            "transport_errors": codes.get("TRANSPORT_ERROR", 0),
            "codes": dict(codes),
            "p50_ms": round(reportmod.percentile(latencies, 50), 2),
            "p90_ms": round(reportmod.percentile(latencies, 90), 2),
            "p99_ms": round(reportmod.percentile(latencies, 99), 2),
            "max_ms": round(latencies[-1], 2) if latencies else 0,
            "throughput_rps": round(len(results) / elapsed, 1),
            "startup_seconds": round(startup, 2),
            "grab_seconds": round(elapsed, 2),
            "drain_seconds": round(drain, 2),
            "reconcile_seconds": round(reconcile_seconds, 2),
            "issuer_deliveries": pump.delivered,
            "redeemed": spending["redeemed"],
            "returned": spending["returned"],
            "double_spends": spending["double_spends"],
            "returns_refused": spending["returns_refused"],
            "notifications": len(told["events"]),
            "notifications_by_type": dict(collections.Counter(told["events"].values())),
            "notification_repeats": told["repeats"],
            "pushed": told["pushed"],
            "notifier_gave_up": stream.given_up,
            "used_in_dynamodb": used_now,
            "order_answers": spending["order_answers"],
            "reconcile": figures,
            "dlq_depth": reconcile.get("dlqDepth"),
        }
        out = ROOT / "target" / "demo" / "report.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")

        print()
        for key in ["requests", "winners", "issued", "stock", "oversell", "duplicates", "lost",
                    "redeemed", "returned", "double_spends", "used_in_dynamodb", "notifications", "pushed",
                    "p50_ms", "p99_ms", "throughput_rps", "startup_seconds", "grab_seconds", "drain_seconds"]:
            print(f"  {key:<18}{report[key]}")
        print(f"  {'stock equation':<18}drift {figures.get('drift')} "
              f"(remaining {figures.get('remaining')}, issued {figures.get('issued')}, "
              f"pending {figures.get('pending')}, rejected {figures.get('rejected')})")
        print(f"\n  report: {out.relative_to(ROOT)}")
        ok = report["oversell"] == 0 and duplicates == 0 and lost == 0 and figures.get("drift") == 0
        ok = ok and report["winners"] == min(args.stock, args.users)
        ok = ok and spending["double_spends"] == 0 and spending["returns_refused"] == 0 and used_now == spending["redeemed"] - spending["returned"]
        # Every transition told exactly once (after dropping repeats by id),
        # and every winner's news reached the push service.
        transitions = issued + spending["redeemed"] + spending["returned"]
        ok = ok and report["notifications"] == transitions and report["pushed"] == issued
        page = reportmod.write(
            ROOT / "target" / "demo" / "report.html",
            {k: report[k] for k in SUMMARY_KEYS if k in report},
            reportmod.timeline(timeline, sampler.samples),
            {
                "total": args.stock,
                "remaining": figures.get("remaining", 0),
                "issued": figures.get("issued", 0),
                "pending": figures.get("pending", 0),
                "rejected": figures.get("rejected", 0),
            },
            ok,
            title=f"Flash sale {coupon_id}: {args.users} users, {args.stock} coupons, {args.shards} shards",
        )
        print(f"  charts: {page.relative_to(ROOT)}")
        print("  OK: exactly the stock, once each, nothing lost, no coupon spent twice, every change told" if ok
              else "  FAILED: see the report")
        return 0 if ok else 1
    finally:
        if server is not None:
            os.killpg(server.pid, signal.SIGTERM)


if __name__ == "__main__":
    sys.exit(main())
