"""The running API conforms to docs/openapi.yaml.

Serves the functions with `cargo lambda watch` (infra/local/serve.sh, on
CONTRACT_LAMBDA_PORT from infra/local/env.sh, so it never meets a `make up`; it
refuses to start if anything already listens there or on its moto port), seeds
a coupon through the admin API so generated requests also reach real data,
then runs schemathesis against each function's routes: generated valid and
invalid requests (bodies, path ids, headers), checking

- no 5xx (`not_a_server_error`),
- every status is one the document lists for the operation
  (`status_code_conformance`),
- every body matches the documented schema (`response_schema_conformance`).

Locally there is no API Gateway: the functions run in their explicit local
modes (TRUST_IDENTITY_HEADERS, ADMIN_LOCAL_MODE in infra/local/functions.env) and the
identity comes from X-User-Id / X-Admin-Actor headers.

Usage: python -m infra.harness.contract [--examples N] [--seed S]
"""
import argparse
import http.client
import http.server
import threading
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
from infra.local.settings import port

PORT = port("CONTRACT_LAMBDA_PORT")
AWS_PORT = port("CONTRACT_AWS_PORT")

# Which operations each function serves (schemathesis filters by path).
FUNCTIONS = {
    "grab": "^/coupons(/|$)",
    "wallet": "^/me/",
    # The IAM-authorized function serves the operators and the order service.
    "admin": "^/(admin|redemptions)/",
}


def call(method, path, body=None, headers=None, timeout=30):
    conn = http.client.HTTPConnection(HOST, PORT, timeout=timeout)
    data = None if body is None else json.dumps(body)
    hdrs = {"content-type": "application/json", "x-admin-actor": "contract-test", "x-user-id": "contract-user"}
    hdrs.update(headers or {})
    conn.request(method, path, body=data, headers=hdrs)
    resp = conn.getresponse()
    return resp.status, resp.read()


def ready(function):
    """True once the function answers with our envelope (it builds on first call)."""
    try:
        status, body = call("GET", f"/lambda-url/{function}/__ready", timeout=600)
    except OSError:
        return False
    return status < 500 and b'"code"' in body


EMULATOR_500 = b'"type":"https://httpstatuses.com/500"'
# A budget for the serving layer's own failures, each retried once and then
# checked like any answer: at most 0.2% of the requests (and never fewer
# than 5). Seen: 0 to 4 in ~5,000 requests; a broken emulator or function
# wiring fails far more, and fails the run.
MAX_EMULATOR_RETRY_SHARE = 0.002
MIN_EMULATOR_RETRY_BUDGET = 5
# Far above what a function needs (its AWS calls give up after 5 s); the
# schemathesis timeout below leaves room for one retry.
FORWARD_TIMEOUT_S = 20
REQUEST_TIMEOUT_S = 2 * FORWARD_TIMEOUT_S + 10


class Retry(http.server.BaseHTTPRequestHandler):
    """Forwards to `cargo lambda watch`; a 500 the emulator wrote itself (its
    problem+json body, never the functions' `{code, message, data}`
    envelope) is retried once and counted. Seen a few times per thousand
    requests, never reproducible by hand. So is a request the emulator never
    answers (once in ~4,500 on a CI machine, with one request in flight): the
    functions bound every call they make (DDB_TIMEOUT_MS, the Redis
    timeouts), so no answer after FORWARD_TIMEOUT_S is the serving layer's,
    and it is retried once on a new connection and counted the same way.
    More than the budget (below) fails the run, and any 5xx the functions
    write reaches schemathesis."""

    protocol_version = "HTTP/1.1"
    forwarded = 0
    retried = []
    sample = None  # the first such body, printed for diagnosis

    def log_message(self, *args):
        pass

    def _forward(self, method, body):
        conn = http.client.HTTPConnection(HOST, PORT, timeout=FORWARD_TIMEOUT_S)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length", "connection")}
        try:
            conn.request(method, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.getheaders(), resp.read()
        except TimeoutError:
            return None, [], f"no answer in {FORWARD_TIMEOUT_S} s".encode()
        finally:
            conn.close()

    def _handle(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        Retry.forwarded += 1
        status, headers, data = self._forward(self.command, body)
        if status is None or (status == 500 and EMULATOR_500 in data):
            Retry.retried.append(f"{self.command} {self.path}")
            Retry.sample = Retry.sample or data[:500]
            status, headers, data = self._forward(self.command, body)
        if status is None:
            # Twice unanswered: schemathesis reports it as the error it is.
            self.send_response(504)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(status)
        for k, v in headers:
            if k.lower() not in ("content-length", "connection", "transfer-encoding", "date", "server"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def __getattr__(self, name):
        # Every method schemathesis tries (GET ... TRACE, QUERY) is forwarded.
        if name.startswith("do_"):
            return self._handle
        raise AttributeError(name)


def retrying_proxy():
    server = http.server.ThreadingHTTPServer((HOST, 0), Retry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]


def own_endpoint():
    """A private moto server, fresh and empty, for this run: the emulator's
    transactions copy its whole state, so the suite's leftovers in the shared
    one would slow every admin write. Returns (process, endpoint URL)."""
    refuse_if_taken("CONTRACT_AWS_PORT", AWS_PORT)
    log = open(ROOT / ".local" / "contract-moto.log", "w")
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "infra" / "local" / "moto_server.py"), "-H", HOST, "-p", str(AWS_PORT)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    for _ in range(100):
        try:
            http.client.HTTPConnection(HOST, AWS_PORT, timeout=1).request("GET", "/")
            break
        except OSError:
            if proc.poll() is not None:
                sys.exit(f"moto exited; see {log.name}")
            time.sleep(0.2)
    return proc, f"http://{HOST}:{AWS_PORT}"


def refuse_if_taken(name, number):
    """Exits if something already listens on the port: the run would test
    that instead of what it starts (another `make up`, an earlier run)."""
    try:
        socket.create_connection((HOST, number), timeout=1).close()
    except OSError:
        return
    sys.exit(f"{name}={number} is in use by a process this run did not start; stop it or choose another port")


def on_own_endpoint(endpoint, **extra):
    """The environment for this run's own moto: every service there, none
    on the stack's per-service endpoints (LOCAL_AWS=localstack sets them)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL_")}
    return dict(env, LOCAL_AWS="moto", AWS_ENDPOINT_URL=endpoint, **extra)


def provision(endpoint):
    env_file = ROOT / ".local" / "contract.env"
    subprocess.run(
        [sys.executable, "-m", "infra.local.provision", "--env-file", str(env_file)],
        check=True,
        stdout=subprocess.DEVNULL,
        cwd=ROOT,
        env=on_own_endpoint(endpoint),
    )
    return env_file


def serve(endpoint, env_file):
    refuse_if_taken("CONTRACT_LAMBDA_PORT", PORT)
    log = open(ROOT / ".local" / "contract-watch.log", "w")
    # One instance per function, started by the warm-up below: the emulator
    # starts further instances on demand with `cargo run`, and a request that
    # lands on one still starting can time out there (a 500 of its own).
    env = on_own_endpoint(
        endpoint,
        LAMBDA_PORT=str(PORT),
        LAMBDA_CONCURRENCY="1",
        STACK_ENV=str(env_file),
    )
    proc = subprocess.Popen(
        # No reloads: files written during the run must not restart functions.
        ["bash", str(ROOT / "infra" / "local" / "serve.sh"), "--ignore-changes"],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=env,
    )
    deadline = time.time() + 900
    for function in FUNCTIONS:
        while not ready(function):
            if proc.poll() is not None:
                sys.exit(f"cargo lambda watch exited; see {log.name}")
            if time.time() > deadline:
                sys.exit(f"{function} did not come up in 15 minutes; see {log.name}")
            time.sleep(1)
    return proc


def seed():
    """A live coupon under the id the document uses in its examples, so the
    examples phase reaches real state (a win, a wallet, a coupon view)."""
    now = int(time.time() * 1000)
    definition = {
        "couponId": "spring-20",
        "name": "contract test",
        "amount": 100,
        "totalStock": 1_000_000,
        "perUserLimit": 100,
        "grabStartMs": now - 3_600_000,
        "grabEndMs": now + 30 * 86_400_000,
        "validFromMs": now,
        "validUntilMs": now + 60 * 86_400_000,
        "shards": 4,
    }
    status, body = call("POST", "/lambda-url/admin/admin/coupons", definition)
    if status != 200 and b"COUPON_CONFLICT" not in body:
        sys.exit(f"seeding failed: {status} {body[:300]!r}")


def check_page(endpoint):
    """infra/harness/page_check.py against this run's functions, the grant
    queue of this run's moto handed to the issuer as the pump would."""
    from infra.harness import page_check
    from infra.local import pump as pumpmod

    settings = dict(line.split("=", 1) for line in (ROOT / ".local" / "contract.env").read_text().split())
    os.environ.update(on_own_endpoint(endpoint, **settings))
    for var in [v for v in os.environ if v.startswith("AWS_ENDPOINT_URL_")]:
        del os.environ[var]
    pumpmod.LAMBDA = f"http://{HOST}:{PORT}"
    pump = pumpmod.Pump()
    page_check.run(f"http://{HOST}:{PORT}", pump.once)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", type=int, default=int(os.environ.get("CONTRACT_EXAMPLES", "200")))
    parser.add_argument("--seed", default=os.environ.get("CONTRACT_SEED", "20261130"))
    args = parser.parse_args()
    (ROOT / ".local").mkdir(exist_ok=True)
    moto, endpoint = own_endpoint()
    proc = None
    failed = []
    try:
        proc = serve(endpoint, provision(endpoint))
        seed()
        proxy_port = retrying_proxy()
        for function, paths in FUNCTIONS.items():
            if os.environ.get("CONTRACT_ONLY", function) != function:
                continue
            print(f"== schemathesis: {function} ({paths})", flush=True)
            cmd = [
                str(ROOT / ".venv" / "bin" / "schemathesis"),
                "run",
                str(ROOT / "docs" / "openapi.yaml"),
                "--url",
                f"http://{HOST}:{proxy_port}/lambda-url/{function}",
                "--include-path-regex",
                paths,
                "--checks",
                "not_a_server_error,status_code_conformance,response_schema_conformance",
                "--max-examples",
                str(args.examples),
                "--seed",
                args.seed,
                "--workers",
                "1",
                "--request-timeout",
                str(REQUEST_TIMEOUT_S),
                "--phases",
                "examples,coverage,fuzzing,stateful" if function == "admin" else "examples,coverage,fuzzing",
                "--suppress-health-check",
                "all",
                "--generation-database",
                "none",
                "--no-color",
                "-H",
                "X-User-Id: contract-user",
                "-H",
                "X-Admin-Actor: contract-test",
            ]
            env = dict(
                os.environ,
                SCHEMATHESIS_HOOKS="infra.harness.contract_hooks",
                PYTHONDONTWRITEBYTECODE="1",
                PYTHONPATH=str(ROOT),
            )
            # Run from .local/: schemathesis keeps its cache (found crashes,
            # with absolute paths and ports) in the working directory, which
            # is machine state, not part of the repository.
            if subprocess.run(cmd, cwd=ROOT / ".local", env=env).returncode != 0:
                failed.append(function)
        if os.environ.get("CONTRACT_ONLY", "page") == "page":
            print("== the try-it page in headless Chromium", flush=True)
            try:
                check_page(endpoint)
            except (AssertionError, RuntimeError, TimeoutError) as e:
                print(f"page: {e}", flush=True)
                failed.append("page")
    finally:
        if os.environ.get("CONTRACT_KEEP") == "1":
            print(f"kept running: functions on {PORT}, moto on {AWS_PORT}")
            return
        for p in (proc, moto):
            if p is not None:
                os.killpg(p.pid, signal.SIGTERM)
    budget = max(MIN_EMULATOR_RETRY_BUDGET, int(Retry.forwarded * MAX_EMULATOR_RETRY_SHARE))
    if Retry.retried:
        print(
            f"emulator 500s and timeouts retried once ({len(Retry.retried)} of {Retry.forwarded} requests, "
            f"budget {budget}): {Retry.retried}"
        )
        print(f"the first one answered: {Retry.sample!r}")
    if len(Retry.retried) > budget:
        failed.append(f"{len(Retry.retried)} emulator 500s or timeouts")
    if failed:
        sys.exit(f"contract violations in: {', '.join(failed)}")
    print("contract: every function conforms to docs/openapi.yaml")


if __name__ == "__main__":
    main()
