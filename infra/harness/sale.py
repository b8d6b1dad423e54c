"""The machinery of one sale under fault, for the fault suite (chaos.py):
the functions served by `cargo lambda watch` or the grab under a Lambda
process host (faults.LambdaHost), the app's clients (`Sale`: presses with
retries of the same request id, every answer recorded with when it was
sent and heard) and issuance (`Issuance`: the event source mappings and the
schedule, each in a thread of its own, then settling the books).

chaos.py decides what each scenario does with them; this module knows no
scenario."""

import collections
import concurrent.futures
import http.client
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

# A press is retried with the same request id on the answers the demo's
# client retries (calls.RETRYABLE).
from infra.harness.calls import RETRYABLE
from infra.harness.lambda_host import LambdaHost, env_file
from infra.local import pump as pumpmod
from infra.local.settings import port

ROOT = pathlib.Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
PORT = port("CHAOS_LAMBDA_PORT")
# The event pump invokes the issuer and the reconciler served here.
pumpmod.LAMBDA = f"http://{HOST}:{PORT}"


# ---------------------------------------------------------------- serving

def refuse_if_taken(number):
    try:
        socket.create_connection((HOST, number), timeout=1).close()
    except OSError:
        return
    sys.exit(f"CHAOS_LAMBDA_PORT={number} is in use by a process this run did not start; stop it or choose another")


def function_env(sqs_url, redis_url, replica_acks):
    """What every function of the run sees beyond infra/local/functions.env: Redis
    through the failover endpoint, a win acknowledged by `replica_acks`
    replicas (1, as the template deploys it), SQS behind the fault proxy."""
    return {"REDIS_URL": redis_url, "REDIS_REPLICA_ACKS": str(replica_acks), "AWS_ENDPOINT_URL_SQS": sqs_url}


def wall_clock(now=None):
    """`now` (default: this instant) as HH:MM:SS.mmm, UTC: the one clock the
    chaos report's fault steps and the functions' stamped log lines share."""
    now = time.time() if now is None else now
    return time.strftime("%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}"


def stamped(path):
    """A pipe whose lines reach the log at `path` each prefixed with the wall
    clock (UTC, to the millisecond): the functions' own lines carry no time
    (Lambda's log service adds it), and the chaos report gives the instants
    of faults and BUSY stretches in the same clock."""
    log = open(path, "w")
    read, write = os.pipe()

    def copy():
        with os.fdopen(read, "rb") as lines:
            for line in lines:
                log.write(f"{wall_clock()} {line.decode('utf-8', 'replace')}")
                log.flush()
    threading.Thread(target=copy, daemon=True).start()
    return write, log


def serve(extra):
    """The functions under cargo lambda watch (as `make up` serves them)."""
    refuse_if_taken(PORT)
    pipe, log = stamped(ROOT / ".local" / "chaos-watch.log")
    env_passed = ("REDIS_URL", "AWS_ENDPOINT_URL_SQS")
    env = dict(os.environ, LAMBDA_PORT=str(PORT), **{k: extra[k] for k in env_passed})
    # serve.sh passes REDIS_URL and the per-service endpoints on from its
    # environment; the rest as flags.
    flags = [arg for k, v in extra.items() if k not in env_passed for arg in ("--env-var", f"{k}={v}")]
    proc = subprocess.Popen(
        ["bash", str(ROOT / "infra" / "local" / "serve.sh"), "--ignore-changes", *flags],
        stdout=pipe,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=env,
    )
    os.close(pipe)
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


def grab_host(extra, environments=6, recycle=False):
    """The grab binary under Lambda's process model (faults.LambdaHost),
    for the scenarios that kill it or meet it cold."""
    env = dict(os.environ)
    env.update(env_file(ROOT / "infra" / "local" / "functions.env"))
    env.update(extra)
    env.update(AWS_LAMBDA_FUNCTION_NAME="grab", AWS_LAMBDA_FUNCTION_MEMORY_SIZE="512",
               AWS_LAMBDA_FUNCTION_VERSION="$LATEST", AWS_LAMBDA_LOG_STREAM_NAME="chaos",
               AWS_LAMBDA_LOG_GROUP_NAME="chaos")
    log = open(ROOT / ".local" / "chaos-grab-host.log", "w")
    return LambdaHost("grab", ROOT / "target" / "debug" / "grab", env, log, environments, recycle)


TEMPLATE = json.loads((ROOT / "tests" / "fixtures" / "grab_jwt.json").read_text())


def gateway_event(coupon, user, ip, body):
    """The HTTP API event API Gateway sends for a press (JWT authorizer)."""
    event = json.loads(json.dumps(TEMPLATE))
    path = f"/coupons/{coupon}/grab"
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    event["pathParameters"] = {"couponId": coupon}
    event["requestContext"]["authorizer"]["jwt"]["claims"]["sub"] = user
    event["requestContext"]["http"]["sourceIp"] = ip
    event["headers"]["x-forwarded-for"] = ip
    event["requestContext"]["requestId"] = f"chaos-{random.getrandbits(48):x}"
    event["requestContext"]["timeEpoch"] = int(time.time() * 1000)
    event["body"] = json.dumps(body)
    event["headers"]["content-length"] = str(len(event["body"]))
    return event


def host_press(host):
    """A press through `host`: what the app sees from API Gateway."""
    def press(coupon, user, ip, body):
        ok, payload = host.invoke(gateway_event(coupon, user, ip, body))
        if not ok:
            return 502, b'{"message":"Internal Server Error"}'
        response = json.loads(payload)
        return response.get("statusCode", 502), (response.get("body") or "").encode()
    return press


def watch_press(coupon, user, ip, body):
    """A press through the function URL `cargo lambda watch` serves."""
    headers = {"x-user-id": user, "x-forwarded-for": ip}
    return call("POST", f"/lambda-url/grab/coupons/{coupon}/grab", body, headers)


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
    def __init__(self, name, stock, shards, users, seed, transport=watch_press, waves=None):
        """`waves`: `[(seconds from now, units), ...]` to release the stock in
        waves (the first must be far enough ahead to still be in the future
        when the coupon is created)."""
        self.name, self.stock, self.users, self.transport = name, stock, users, transport
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
        # Each wave's instant (ms since epoch) and units.
        self.waves = [(now + int(seconds * 1000), units) for seconds, units in waves or []]
        if self.waves:
            self.definition["waves"] = [{"atMs": at, "units": units} for at, units in self.waves]
        self.rng = random.Random(seed)
        self.told = collections.defaultdict(set)  # user -> grant ids told SUCCESS
        self.codes = collections.Counter()
        self.lock = threading.Lock()
        self.pressed = 0
        self.answers = []  # (answered, sent, code) in monotonic seconds, every answer a press heard

    def create(self):
        """Creates (or re-creates) the coupon as an operator's script does:
        a retryable answer (a connection dropped by a failover) is retried."""
        for _ in range(20):
            status, body = call("POST", "/lambda-url/admin/admin/coupons", self.definition)
            if status not in (0, 429, 500, 502, 503):
                break
            time.sleep(0.5)
        if status != 200:
            sys.exit(f"{self.name}: create failed: {status} {body[:300]!r}")
        return json.loads(body)

    def press(self, user, request_id):
        """Presses until a final answer, retrying the same request id."""
        ip = f"198.18.{hash(user) % 200}.{hash(user) % 250}"
        for _ in range(80):
            sent = time.monotonic()
            status, body = self.transport(self.coupon, user, ip, {"requestId": request_id})
            try:
                payload = json.loads(body) if body else {}
            except json.JSONDecodeError:
                payload = {}
            code = payload.get("code") or ("TRANSPORT_ERROR" if status == 0 else "GATEWAY_ERROR")
            with self.lock:
                self.codes[code] += 1
                self.answers.append((time.monotonic(), sent, code))
                if code == "SUCCESS":
                    self.told[user].add(payload["data"]["grantId"])
            if code not in RETRYABLE:
                return code
            time.sleep(0.25)
        return "GAVE_UP"

    def run_wave(self, users, wave, hooks, concurrency=16, per_second=None):
        """Every user in `users` presses once (some retry a press as a
        flaky network does), arriving at `per_second` if given (else as
        fast as the clients go); `hooks` maps a share of the presses done
        to a fault to inject then. Returns once every press has its final
        answer and every fault has run its course."""
        work = [(u, f"{u}-w{wave}") for u in users]
        work += [w for w in work if self.rng.random() < 0.1]
        self.rng.shuffle(work)
        pending = sorted(hooks.items())
        threads = []

        def fire(done):
            while pending and done >= pending[0][0] * len(work):
                _, hook = pending.pop(0)
                threads.append(threading.Thread(target=hook, daemon=True))
                threads[-1].start()

        with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
            futures = []
            for n, (u, r) in enumerate(work):
                futures.append(pool.submit(self.press, u, r))
                if per_second:
                    fire(n)  # by arrivals: the fault lands while presses still come
                    time.sleep(1 / per_second)
            for n, _ in enumerate(concurrent.futures.as_completed(futures), 1):
                fire(n)
        for thread in threads:
            thread.join()


class Issuance:
    """The event source mappings and the schedule, each in a thread of its
    own as they are separate invocations in AWS (a long scheduled pass
    holds up neither issuance nor a repair): batches to the issuer, repair
    requests to the reconciler, and the reconciler every `tick` seconds."""

    def __init__(self, duplicate=False, reconcilers=1, tick=2.0):
        self.pump = pumpmod.Pump()
        self.duplicate, self.reconcilers, self.tick = duplicate, reconcilers, tick
        self.stop = threading.Event()
        # Set: the issuer's event source is paused (nothing is delivered),
        # as an issuer throttled to nothing or disabled by an operator.
        self.paused = threading.Event()
        self.reports = []
        self.threads = [threading.Thread(target=loop, daemon=True)
                        for loop in (self.issue_loop, self.repair_loop, self.tick_loop)]
        for thread in self.threads:
            thread.start()

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

    def pumping(self, once):
        """Calls `once` until stopped, pausing when it found nothing."""
        while not self.stop.is_set():
            try:
                if not once():
                    time.sleep(0.05)
            except Exception as e:  # noqa: BLE001 keep pumping through faults
                print(f"  pump: {e}", file=sys.stderr)
                time.sleep(0.2)

    def issue_loop(self):
        self.pumping(lambda: 0 if self.paused.is_set() else self.deliver())

    def repair_loop(self):
        self.pumping(self.pump.repair)

    def tick_loop(self):
        while not self.stop.wait(self.tick):
            self.reconcile()

    def settle(self, coupon, deadline_seconds=180):
        """Stops the loop, then pumps and reconciles until the coupon's books
        are settled (nothing pending, no shard missing)."""
        self.stop.set()
        for thread in self.threads:
            thread.join()
        start = time.monotonic()
        figures = {}
        while time.monotonic() - start < deadline_seconds:
            self.pump.drain(quiet_seconds=0.5, deadline_seconds=60)
            report = pumpmod.invoke("reconciler", {})
            figures = next((c for c in report.get("coupons", []) if c["couponId"] == coupon), {})
            missing = (any("no Redis state" in cause for cause in figures.get("causes", []))
                       or figures.get("shardsWaiting", 0) > 0)
            if figures and figures.get("pending") == 0 and not missing and figures.get("redriven", 0) == 0:
                return figures
            time.sleep(1)
        return figures



def stop_serving(proc):
    """Stops cargo lambda watch and waits until its port is free again."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    for _ in range(100):
        try:
            socket.create_connection((HOST, PORT), timeout=0.2).close()
        except OSError:
            return
        time.sleep(0.1)


