"""`make chaos`: one flash sale per fault, through HTTP, against the local
stack: the functions served by `cargo lambda watch` (as `make up` serves
them), issuance by the local event pump, the reconciler on a short tick.

Each scenario runs a small sale (its own coupon) with clients that behave
like the app: they retry a press with the same request id when the answer
is retryable (503 BUSY, 429, a 5xx of the emulator, a broken connection),
and stop at a final answer. A fault is injected while the sale runs and
healed; issuance is drained and the reconciler runs until the books settle;
then DynamoDB is read and each scenario is judged on the users' side:

- winners: users told SUCCESS;
- issued: coupons in DynamoDB;
- oversell: coupons issued beyond the stock;
- duplicates: coupons beyond a user's limit, or a grant issued twice;
- lost: a grant a user was told SUCCESS for that is not in their wallet;
- rejected_after_success: a grant a user was told SUCCESS for that the
  issuer recorded REJECTED.

Every figure but winners and issued must be 0, and issued must equal
winners; the command prints a table, writes target/chaos/report.json, and
exits non-zero otherwise.

    python infra/chaos.py                      every scenario
    python infra/chaos.py --only redis_flush   one (or a comma-separated list)
    python infra/chaos.py --short              the short pass CI runs

The faults are real ones on this machine: SQS sends refused at the wire (an
HTTP proxy between the functions and the endpoint answers 503 to
SendMessage), Redis flushed, stock added while presses run, the coupon
created again after Redis lost it, every message delivered twice, two
reconcilers at once, and poison messages on the grant queue. A failover to
a lagging replica is reproduced with a real primary and replica by the
integration tests (tests/integration/failover.rs), which stop and promote
them; a grab process dying between its decision and its answer, by
tests/integration/reconcile.rs (killing a function process under
`cargo lambda watch` leaves the emulator's invoke API hanging, so it is not
a scenario here yet).
"""
import argparse
import collections
import concurrent.futures
import http.client
import http.server
import json
import os
import pathlib
import random
import signal
import socket
import subprocess
import sys
import threading
import time

import boto3

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import pump as pumpmod  # noqa: E402
from localenv import port  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
PORT = port("CHAOS_LAMBDA_PORT")
# The event pump invokes the issuer and the reconciler served here.
pumpmod.LAMBDA = f"http://{HOST}:{PORT}"
RETRYABLE = {"BUSY", "RATE_LIMITED", "TRANSPORT_ERROR", "EMULATOR_ERROR"}


# ---------------------------------------------------------------- the wire

class SqsFaults:
    """An HTTP proxy for SQS between the functions and the local endpoint.
    While `refusing` is set it answers SendMessage with 503, as SQS does
    when it cannot take a message; everything else passes through."""

    def __init__(self, upstream):
        self.upstream = upstream.split("://", 1)[1]
        self.refusing = threading.Event()
        self.refused = 0
        faults = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                try:
                    self.relay()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the caller went away (a retry, a shutdown)

            def relay(self):
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                target = self.headers.get("x-amz-target", "") + body[:200].decode("latin-1")
                if faults.refusing.is_set() and "SendMessage" in target:
                    faults.refused += 1
                    payload = b'{"__type":"ServiceUnavailable","message":"chaos: SQS refuses sends"}'
                    self.send_response(503)
                    self.send_header("content-type", "application/x-amz-json-1.0")
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                conn = http.client.HTTPConnection(faults.upstream, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                conn.request("POST", self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = http.server.ThreadingHTTPServer((HOST, 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://{HOST}:{self.server.server_address[1]}"


def refuse_if_taken(number):
    try:
        socket.create_connection((HOST, number), timeout=1).close()
    except OSError:
        return
    sys.exit(f"CHAOS_LAMBDA_PORT={number} is in use by a process this run did not start; stop it or choose another")


def serve(sqs_url):
    """The functions under cargo lambda watch, with SQS behind the proxy."""
    refuse_if_taken(PORT)
    log = open(ROOT / ".local" / "chaos-watch.log", "w")
    env = dict(os.environ, LAMBDA_PORT=str(PORT))
    proc = subprocess.Popen(
        ["bash", str(ROOT / "infra" / "serve.sh"), "--ignore-changes", "--env-var", f"AWS_ENDPOINT_URL_SQS={sqs_url}"],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=env,
    )
    deadline = time.time() + 900
    for function in ("grab", "admin"):
        while True:
            status, body = call("GET", f"/lambda-url/{function}/__ready", timeout=600)
            if status and b'"code"' in body:
                break
            if proc.poll() is not None:
                sys.exit(f"cargo lambda watch exited; see {log.name}")
            if time.time() > deadline:
                sys.exit(f"{function} did not come up; see {log.name}")
            time.sleep(1)
    return proc


class Local(threading.local):
    conn = None


LOCAL = Local()


def call(method, path, body=None, headers=None, timeout=30):
    """One HTTP call; (0, b'') on a broken connection."""
    for _ in range(2):
        try:
            if LOCAL.conn is None:
                LOCAL.conn = http.client.HTTPConnection(HOST, PORT, timeout=timeout)
            hdrs = {"content-type": "application/json", "x-admin-actor": "chaos", **(headers or {})}
            LOCAL.conn.request(method, path, body=None if body is None else json.dumps(body), headers=hdrs)
            resp = LOCAL.conn.getresponse()
            return resp.status, resp.read()
        except (OSError, http.client.HTTPException):
            LOCAL.conn = None
    return 0, b""


# --------------------------------------------------------------- the sale

class Sale:
    def __init__(self, name, stock, shards, users, seed):
        self.name, self.stock, self.users = name, stock, users
        now = int(time.time() * 1000)
        self.coupon = f"chaos-{name.replace('_', '-')}-{now}"
        self.definition = {
            "couponId": self.coupon,
            "name": f"chaos {name}",
            "amount": 500,
            "totalStock": stock,
            "perUserLimit": 1,
            "grabStartMs": now - 1000,
            "grabEndMs": now + 3_600_000,
            "validFromMs": now,
            "validUntilMs": now + 86_400_000,
            "shards": shards,
        }
        self.rng = random.Random(seed)
        self.told = collections.defaultdict(set)  # user -> grant ids told SUCCESS
        self.codes = collections.Counter()
        self.lock = threading.Lock()
        self.pressed = 0

    def create(self):
        status, body = call("POST", "/lambda-url/admin/admin/coupons", self.definition)
        if status != 200:
            sys.exit(f"{self.name}: create failed: {status} {body[:300]!r}")
        return json.loads(body)

    def press(self, user, request_id):
        """Presses until a final answer, retrying the same request id."""
        path = f"/lambda-url/grab/coupons/{self.coupon}/grab"
        headers = {"x-user-id": user, "x-forwarded-for": f"198.18.{hash(user) % 200}.{hash(user) % 250}"}
        for _ in range(80):
            status, body = call("POST", path, {"requestId": request_id}, headers)
            try:
                payload = json.loads(body) if body else {}
            except json.JSONDecodeError:
                payload = {}
            code = payload.get("code") or ("TRANSPORT_ERROR" if status == 0 else "EMULATOR_ERROR")
            with self.lock:
                self.codes[code] += 1
                if code == "SUCCESS":
                    self.told[user].add(payload["data"]["grantId"])
            if code not in RETRYABLE:
                return code
            time.sleep(0.25)
        return "GAVE_UP"

    def run_wave(self, users, wave, hooks, concurrency=16):
        """Every user in `users` presses once (some retry a press as a
        flaky network does); `hooks` maps a share of the presses done to a
        fault to inject then."""
        work = [(u, f"{u}-w{wave}") for u in users]
        work += [w for w in work if self.rng.random() < 0.1]
        self.rng.shuffle(work)
        pending = sorted(hooks.items())
        with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
            futures = [pool.submit(self.press, u, r) for u, r in work]
            for n, _ in enumerate(concurrent.futures.as_completed(futures), 1):
                while pending and n >= pending[0][0] * len(work):
                    _, hook = pending.pop(0)
                    threading.Thread(target=hook, daemon=True).start()


class Issuance:
    """The event source mapping and the schedule, in a thread: batches to
    the issuer, the reconciler every `tick` seconds."""

    def __init__(self, duplicate=False, reconcilers=1, tick=2.0):
        self.pump = pumpmod.Pump()
        self.duplicate, self.reconcilers, self.tick = duplicate, reconcilers, tick
        self.stop = threading.Event()
        self.reports = []
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def deliver(self):
        if not self.duplicate:
            return self.pump.once()
        out = self.pump.sqs.receive_message(QueueUrl=self.pump.queue, MaxNumberOfMessages=10, AttributeNames=["All"])
        messages = out.get("Messages", [])
        if not messages:
            return 0
        event = pumpmod.sqs_event(messages, self.pump.arn)
        try:
            pumpmod.invoke("issuer", event)  # the duplicate
        except Exception as e:  # noqa: BLE001 the real delivery below decides
            print(f"  duplicate delivery failed: {e}", file=sys.stderr)
        self.pump.sqs.change_message_visibility_batch(
            QueueUrl=self.pump.queue,
            Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
                     for i, m in enumerate(messages)],
        )
        return self.pump.once()

    def reconcile(self):
        with concurrent.futures.ThreadPoolExecutor(self.reconcilers) as pool:
            for f in [pool.submit(pumpmod.invoke, "reconciler", {}) for _ in range(self.reconcilers)]:
                try:
                    self.reports.append(f.result())
                except Exception as e:  # noqa: BLE001 a failed run is retried next tick
                    print(f"  reconciler failed: {e}", file=sys.stderr)

    def loop(self):
        next_tick = time.monotonic() + self.tick
        while not self.stop.is_set():
            try:
                if not self.deliver():
                    time.sleep(0.05)
            except Exception as e:  # noqa: BLE001 keep pumping through faults
                print(f"  pump: {e}", file=sys.stderr)
                time.sleep(0.2)
            if time.monotonic() >= next_tick:
                self.reconcile()
                next_tick = time.monotonic() + self.tick

    def settle(self, coupon, deadline_seconds=180):
        """Stops the loop, then pumps and reconciles until the coupon's books
        are settled (nothing pending, no shard missing)."""
        self.stop.set()
        self.thread.join()
        start = time.monotonic()
        figures = {}
        while time.monotonic() - start < deadline_seconds:
            self.pump.drain(quiet_seconds=0.5, deadline_seconds=60)
            report = pumpmod.invoke("reconciler", {})
            figures = next((c for c in report.get("coupons", []) if c["couponId"] == coupon), {})
            missing = any("no Redis state" in cause for cause in figures.get("causes", []))
            if figures and figures.get("pending") == 0 and not missing and figures.get("redriven", 0) == 0:
                return figures
            time.sleep(1)
        return figures


def ledger(coupon):
    ddb = boto3.client("dynamodb", endpoint_url=os.environ["AWS_ENDPOINT_URL"],
                       region_name=os.environ.get("AWS_REGION", "us-east-1"))
    held, rejected = [], set()
    for page in ddb.get_paginator("query").paginate(
        TableName=os.environ["USER_COUPONS_TABLE"], IndexName="by-coupon",
        KeyConditionExpression="coupon_id = :c", ExpressionAttributeValues={":c": {"S": coupon}},
    ):
        held += [(i["user_id"]["S"], i["grant_id"]["S"]) for i in page["Items"]]
    for page in ddb.get_paginator("query").paginate(
        TableName=os.environ["COUPONS_TABLE"], KeyConditionExpression="pk = :pk AND begins_with(sk, :g)",
        ExpressionAttributeValues={":pk": {"S": f"COUPON#{coupon}"}, ":g": {"S": "GRANT#"}},
    ):
        rejected |= {i["sk"]["S"].removeprefix("GRANT#") for i in page["Items"]}
    return held, rejected


def judge(sale, figures):
    held, rejected = ledger(sale.coupon)
    wallets = collections.defaultdict(set)
    for user, grant in held:
        wallets[user].add(grant)
    ids = [g for _, g in held]
    told = {(u, g) for u, grants in sale.told.items() for g in grants}
    return {
        "coupon": sale.coupon,
        "stock": sale.stock,
        "winners": len(sale.told),
        "issued": len(held),
        "oversell": max(0, len(held) - sale.stock),
        "duplicates": sum(max(0, len(g) - 1) for g in wallets.values()) + len(ids) - len(set(ids))
        + sum(max(0, len(g) - 1) for g in sale.told.values()),
        "lost": sum(1 for u, g in told if g not in wallets.get(u, set())),
        "rejected_after_success": sum(1 for _, g in told if g in rejected),
        "unsold": max(0, sale.stock - len(held)),
        "answers": dict(sale.codes),
        "drift": figures.get("drift"),
    }


# --------------------------------------------------------------- scenarios

def redis_cli(*args):
    subprocess.run(["redis-cli", "-p", os.environ["REDIS_PORT"], *args], check=True, stdout=subprocess.DEVNULL)


def scenario(name, faults, short, seed):
    users = 120 if short else 300
    stock = 40 if short else 100
    sale = Sale(name, stock, 2, users, seed)
    injected = []
    issuance = Issuance(duplicate=name == "duplicate_delivery",
                        reconcilers=2 if name == "concurrent_reconcilers" else 1)
    sale.create()
    people = [f"{name}-u{i}" for i in range(users)]

    def note(what):
        injected.append({"atPress": sum(sale.codes.values()), "what": what})

    hooks = {}
    if name == "sqs_outage":
        def outage():
            note("SQS refuses every SendMessage for 3 s")
            faults.refusing.set()
            time.sleep(3)
            faults.refusing.clear()
            note(f"SQS takes sends again ({faults.refused} refused)")
        hooks[0.2] = outage
    elif name in ("redis_flush", "concurrent_reconcilers"):
        def flush():
            redis_cli("FLUSHALL")
            note("Redis FLUSHALL (every shard, outbox and record gone)")
        hooks[0.3] = flush
    elif name == "recreate_after_loss":
        def recreate():
            redis_cli("FLUSHALL")
            note("Redis FLUSHALL")
            created = sale.create()
            note(f"coupon created again (created={created['data']['created']})")
        hooks[0.3] = recreate
    elif name == "poison_messages":
        def poison():
            for i in range(10):
                issuance.pump.sqs.send_message(QueueUrl=issuance.pump.queue, MessageBody=f'{{"not":"a grant {i}"}}')
            note("10 poison messages on the grant queue")
        hooks[0.3] = poison

    sale.run_wave(people, 1, hooks)
    if name == "refill_during_sale":
        add = stock // 2
        status, _ = call("POST", f"/lambda-url/admin/admin/coupons/{sale.coupon}/stock", {"add": add},
                         {"idempotency-key": f"refill-{sale.coupon}"})
        note(f"{add} units added after the sell-out (status {status}), presses go on")
        sale.stock += add
        time.sleep(1.2)  # past the instances' sold-out memory
        losers = [u for u in people if u not in sale.told]
        sale.run_wave(losers, 2, {})
    figures = issuance.settle(sale.coupon)
    result = judge(sale, figures)
    result["injected"] = injected
    return result


SCENARIOS = [
    "sqs_outage", "redis_flush", "refill_during_sale", "recreate_after_loss",
    "duplicate_delivery", "concurrent_reconcilers", "poison_messages",
]
SHORT = ["sqs_outage", "redis_flush", "refill_during_sale", "duplicate_delivery"]
ZERO = ["oversell", "duplicates", "lost", "rejected_after_success"]


def main():
    parser = argparse.ArgumentParser(description="One flash sale per fault.")
    parser.add_argument("--only", help="comma-separated scenario names")
    parser.add_argument("--short", action="store_true", help="the short pass: fewer scenarios, smaller sales")
    parser.add_argument("--seed", type=int, default=20261130)
    args = parser.parse_args()
    names = args.only.split(",") if args.only else (SHORT if args.short else SCENARIOS)
    unknown = set(names) - set(SCENARIOS)
    if unknown:
        sys.exit(f"unknown scenario(s): {', '.join(sorted(unknown))}; known: {', '.join(SCENARIOS)}")
    (ROOT / ".local").mkdir(exist_ok=True)
    faults = SqsFaults(os.environ["AWS_ENDPOINT_URL"])
    proc = serve(faults.url)
    results = {}
    try:
        for name in names:
            print(f"== {name}", flush=True)
            results[name] = scenario(name, faults, args.short, args.seed)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
    out = ROOT / "target" / "chaos" / "report.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")

    cols = ["winners", "issued", *ZERO, "drift"]
    print(f"\n  {'scenario':<24}" + "".join(f"{c:>24}" for c in cols))
    failed = []
    for name, r in results.items():
        ok = all(r[k] == 0 for k in ZERO) and r["issued"] == r["winners"] and r["drift"] == 0
        if not ok:
            failed.append(name)
        print(f"  {name:<24}" + "".join(f"{str(r[c]):>24}" for c in cols) + ("" if ok else "   <- FAILED"))
    print(f"\n  report: {out.relative_to(ROOT)}")
    if failed:
        print(f"  FAILED: {', '.join(failed)}")
        return 1
    print("  OK: every SUCCESS is exactly one coupon, under every fault")
    return 0


if __name__ == "__main__":
    sys.exit(main())
