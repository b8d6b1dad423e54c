"""The try-it page's server (infra/local/page.py): the page's two files, and
a proxy that reaches the two functions the page calls and nothing else,
with only the headers the page sends. The page itself is driven in
headless Chromium by infra/harness/page_check.py (make test-contract)."""
import http.server
import json
import threading
import urllib.error
import urllib.request

from infra.local import page


def fake_functions():
    """A stand-in for `cargo lambda watch` that answers what it was asked."""
    class Echo(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            length = int(self.headers.get("content-length") or 0)
            body = json.dumps({
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": self.rfile.read(length).decode(),
            }).encode()
            self.send_response(201)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def fetch(url, data=None, headers=None, method="GET"):
    request = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_the_page_is_served_and_calls_reach_the_function_with_only_the_page_s_headers():
    functions = fake_functions()
    server = page.start(f"http://127.0.0.1:{functions.server_address[1]}")
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        status, html = fetch(base + "/")
        assert status == 200 and b'<script src="app.js">' in html
        assert fetch(base + "/app.js")[0] == 200
        assert fetch(base + "/../resources.json")[0] == 404
        status, body = fetch(
            base + "/api/grab/coupons/demo/grab",
            data=b'{"requestId":"r1"}',
            headers={"content-type": "application/json", "x-user-id": "alice", "x-admin-actor": "mallory"},
            method="POST",
        )
        seen = json.loads(body)
        assert status == 201
        assert seen["path"] == "/lambda-url/grab/coupons/demo/grab"
        assert seen["body"] == '{"requestId":"r1"}'
        assert seen["headers"]["x-user-id"] == "alice"
        assert "x-admin-actor" not in seen["headers"], "only the page's own headers are forwarded"
        for other in ("/api/issuer/invocations", "/api/admin/admin/coupons"):
            assert fetch(base + other, data=b"{}", method="POST")[0] == 404, other
    finally:
        server.shutdown()
        functions.shutdown()
