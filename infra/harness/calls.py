"""The demo's calls of the served functions (cargo lambda watch on
LAMBDA_PORT): starting them unless something answers, a press of the grab
(retried as docs/api.md asks of every client), a call of the order
service, an operator's read. One keep-alive connection per thread; a
broken one is replaced and the call retried."""

import collections
import concurrent.futures
import http.client
import json
import os
import pathlib
import random
import subprocess
import sys
import threading
import time

from infra.local.settings import port

ROOT = pathlib.Path(__file__).resolve().parents[2]
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
    """Starts infra/local/serve.sh unless something answers, then warms
    every function (`warm`); returns the process or None."""
    if listening():
        warm()
        return None
    log = open(ROOT / ".local" / "watch.log", "w")
    # --ignore-changes: a file saved in the tree while the sale runs must
    # not restart the functions under it (each restart drops the
    # invocations in flight: presses that never get an answer).
    proc = subprocess.Popen(
        ["bash", str(ROOT / "infra" / "local" / "serve.sh"), "--ignore-changes"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    for _ in range(600):
        if listening():
            warm()
            return proc
        if proc.poll() is not None:
            sys.exit(f"cargo lambda watch exited; see {log.name}")
        time.sleep(0.5)
    sys.exit("cargo lambda watch did not start in 5 minutes")


# The functions as the demo calls them, each with a call that changes
# nothing: an unknown path of an HTTP function (a 404 envelope), an empty
# batch of an event function. The reconciler is left to its first pass:
# any invocation of it that is not a repair batch is a whole pass.
WARM_CALLS = {
    "grab": ("GET", "/lambda-url/grab/__warm", None),
    "wallet": ("GET", "/lambda-url/wallet/__warm", None),
    "admin": ("GET", "/lambda-url/admin/__warm", None),
    "issuer": ("POST", "/2015-03-31/functions/issuer/invocations", {"Records": []}),
    "notifier": ("POST", "/2015-03-31/functions/notifier/invocations", {"Records": []}),
}


def warm(deadline_seconds=900):
    """Starts every instance of every function before the sale, as
    provisioned concurrency does in AWS: `cargo lambda watch` builds a
    function on its first call (a fresh clone compiles each one then) and
    starts instances only as calls queue, so a sale that met them cold
    spent its first seconds waiting for compilers and starts. Rounds of
    twice LAMBDA_CONCURRENCY calls at once go to each function until a
    whole round answers within 0.5 s, twice in a row (every instance up)."""
    width = 2 * int(os.environ.get("LAMBDA_CONCURRENCY", "4"))
    deadline = time.time() + deadline_seconds

    def call(method, path, body):
        c = http.client.HTTPConnection(HOST, PORT, timeout=600)
        c.request(method, path, body=None if body is None else json.dumps(body),
                  headers={"content-type": "application/json"})
        c.getresponse().read()

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(width) as pool:
        for name, (method, path, body) in WARM_CALLS.items():
            quick, rounds = 0, 0
            # The first round may wait minutes (a build); on a loaded
            # machine a round may never be quick: 30 rounds are enough.
            while quick < 2 and rounds < 30 and time.time() < deadline:
                rounds += 1
                t0 = time.perf_counter()
                for f in [pool.submit(call, method, path, body) for _ in range(width)]:
                    try:
                        f.result()
                    except (OSError, http.client.HTTPException):
                        quick = -1  # still starting: the round does not count
                quick = quick + 1 if time.perf_counter() - t0 < 0.5 else 0
    print(f"  functions warm ({width} calls at once each) in {time.perf_counter() - started:.1f} s")


# How long a client waits for one answer before it gives the attempt up
# (and, for a press, retries it): a phone app's patience, twice the grab's
# Lambda timeout in AWS (5 s). Locally it also bounds the cost of an
# invocation the Lambda emulator loses now and then under load (a call
# that never gets an answer): one retry, not a hung user.
ATTEMPT_TIMEOUT_SECONDS = 10


class Client(threading.local):
    def conn(self):
        if not hasattr(self, "c"):
            self.c = http.client.HTTPConnection(HOST, PORT, timeout=ATTEMPT_TIMEOUT_SECONDS)
        return self.c


CLIENT = Client()


# What docs/api.md asks of every client: a press whose answer decided
# nothing (503 BUSY, a 5xx without the service's envelope, a broken
# connection, 429) is sent again with the same request id, after the
# answer's Retry-After or a growing, jittered pause, until a final answer.
RETRYABLE = {"BUSY", "RATE_LIMITED", "TRANSPORT_ERROR", "GATEWAY_ERROR"}
# How long a user keeps retrying one press: far past a win's send budget
# (GRANT_SEND_BUDGET_MS, 2 s) plus a re-drive by the reconciler
# (RECONCILE_GRACE_MS, 5 s locally, and its schedule).
PRESS_PATIENCE_SECONDS = 60.0


class Press(collections.namedtuple("Press", "user request_id status payload ms")):
    """One press as its user lived it: the final answer (`status`,
    `payload`), `ms` from the first send to that answer, and `retried`, the
    retryable answers heard before it (BUSY, TRANSPORT_ERROR, ...). Of the
    last attempt alone: `last_ms` as the client measured it and
    `server_ms`, the grab handler's own time (its `Server-Timing`), or
    None when no answer came."""

    retried = ()
    last_ms = 0.0
    server_ms = None


def server_time(header):
    """The `app;dur=<ms>` of a Server-Timing header, or None."""
    for metric in (header or "").split(","):
        name, _, rest = metric.strip().partition(";")
        if name == "app" and rest.startswith("dur="):
            try:
                return float(rest[4:])
            except ValueError:
                return None
    return None


def backoff(attempt, retry_after):
    """The pause before retry `attempt` (1-based): the server's Retry-After
    when it gave one, else 0.1 s doubling to 2 s; jittered, so a crowd
    told BUSY together does not come back together."""
    base = float(retry_after) if retry_after else min(2.0, 0.1 * 2 ** (attempt - 1))
    return base * random.uniform(0.5, 1.0)


class Answer(collections.namedtuple("Answer", "status payload retried total_ms last_ms server_ms")):
    """A call's final answer (`status`, `payload`), the retryable answers
    heard before it, the time from the first send to it and of its last
    attempt alone, and the handler's own time (Server-Timing) if given."""


def attempt(method, path, body, headers):
    """One send on this thread's connection: `(status, payload,
    retry_after, server_ms)`; a broken connection (or no answer within
    ATTEMPT_TIMEOUT_SECONDS) is TRANSPORT_ERROR, a 5xx without the
    service's envelope GATEWAY_ERROR."""
    try:
        c = CLIENT.conn()
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        raw = r.read()
        payload = json.loads(raw) if raw else {}
        if not isinstance(payload, dict) or "code" not in payload:
            payload = {"code": "GATEWAY_ERROR" if r.status >= 500 else "TRANSPORT_ERROR"}
        return r.status, payload, r.getheader("retry-after"), server_time(r.getheader("server-timing"))
    except (OSError, http.client.HTTPException, json.JSONDecodeError):
        CLIENT.c = http.client.HTTPConnection(HOST, PORT, timeout=ATTEMPT_TIMEOUT_SECONDS)
        return 0, {"code": "TRANSPORT_ERROR"}, None, None


def until_final(method, path, body=None, headers=None):
    """A call sent again, unchanged, while its answer decided nothing (as
    docs/api.md asks of every client; every route the demo calls is
    idempotent: a press by its request id, a registration per user, a
    redemption per order, a reminder per user and coupon), for up to
    PRESS_PATIENCE_SECONDS; then the last retryable answer stands."""
    data = None if body is None else json.dumps(body)
    start = time.perf_counter()
    retried = []
    while True:
        sent = time.perf_counter()
        status, payload, retry_after, server_ms = attempt(method, path, data, headers or {})
        now = time.perf_counter()
        code = payload.get("code")
        if code not in RETRYABLE or now - start > PRESS_PATIENCE_SECONDS:
            return Answer(status, payload, tuple(retried), (now - start) * 1000, (now - sent) * 1000, server_ms)
        retried.append(code)
        time.sleep(backoff(len(retried), retry_after))


def grab(coupon_id, user, request_id, ip):
    """A user's press, retried until a final answer (`until_final`)."""
    headers = {"content-type": "application/json", "x-user-id": user, "x-forwarded-for": ip}
    a = until_final("POST", f"/lambda-url/grab/coupons/{coupon_id}/grab", {"requestId": request_id}, headers)
    press = Press(user, request_id, a.status, a.payload, a.total_ms)
    press.retried, press.last_ms, press.server_ms = a.retried, a.last_ms, a.server_ms
    return press


def order_call(method, path, body):
    """A call of the order service (the IAM-authorized function; locally
    its explicit local identity), retried until a final answer."""
    headers = {"content-type": "application/json", "x-admin-actor": "order-service"}
    return until_final(method, f"/lambda-url/admin{path}", body, headers).payload


def admin_get(path):
    """An operator's read (locally the admin function's explicit local identity)."""
    try:
        c = http.client.HTTPConnection(HOST, PORT, timeout=30)
        c.request("GET", f"/lambda-url/admin{path}", headers={"x-admin-actor": "demo-report"})
        return json.loads(c.getresponse().read() or b"{}")
    except (OSError, http.client.HTTPException, json.JSONDecodeError):
        return {}


def wallet_call(method, path, user):
    """A user's call of the wallet (locally the explicit local identity,
    `X-User-Id`), retried until a final answer."""
    return until_final(method, f"/lambda-url/wallet{path}", headers={"x-user-id": user}).payload


def grab_call(method, path, user, body=None, headers=None):
    """A user's call of another grab route (a lottery's entries, its
    result; locally the explicit local identity, `X-User-Id`), retried
    until a final answer."""
    hdrs = {"x-user-id": user, "content-type": "application/json"}
    hdrs.update(headers or {})
    return until_final(method, f"/lambda-url/grab{path}", body, hdrs).payload
