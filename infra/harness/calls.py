"""The demo's calls of the served functions (cargo lambda watch on
LAMBDA_PORT): starting them unless something answers, a press of the grab,
a call of the order service, an operator's read. One keep-alive connection
per thread; a broken one is replaced and the call retried."""

import http.client
import json
import pathlib
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
    """Starts infra/local/serve.sh unless something answers; returns the process or None."""
    if listening():
        return None
    log = open(ROOT / ".local" / "watch.log", "w")
    proc = subprocess.Popen(
        ["bash", str(ROOT / "infra" / "local" / "serve.sh")], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    for _ in range(600):
        if listening():
            return proc
        if proc.poll() is not None:
            sys.exit(f"cargo lambda watch exited; see {log.name}")
        time.sleep(0.5)
    sys.exit("cargo lambda watch did not start in 5 minutes")


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
    `X-User-Id`)."""
    for _ in range(3):
        try:
            c = CLIENT.conn()
            c.request(method, f"/lambda-url/wallet{path}", headers={"x-user-id": user})
            return json.loads(c.getresponse().read() or b"{}")
        except (OSError, http.client.HTTPException, json.JSONDecodeError):
            CLIENT.c = http.client.HTTPConnection(HOST, PORT, timeout=30)
    return {"code": "TRANSPORT_ERROR"}


def grab_call(method, path, user, body=None, headers=None):
    """A user's call of another grab route (a lottery's entries, its
    result; locally the explicit local identity, `X-User-Id`)."""
    hdrs = {"x-user-id": user, "content-type": "application/json"}
    hdrs.update(headers or {})
    data = None if body is None else json.dumps(body)
    for _ in range(3):
        try:
            c = CLIENT.conn()
            c.request(method, f"/lambda-url/grab{path}", body=data, headers=hdrs)
            return json.loads(c.getresponse().read() or b"{}")
        except (OSError, http.client.HTTPException, json.JSONDecodeError):
            CLIENT.c = http.client.HTTPConnection(HOST, PORT, timeout=30)
    return {"code": "TRANSPORT_ERROR"}

