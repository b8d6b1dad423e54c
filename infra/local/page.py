#!/usr/bin/env python3
"""The local try-it page: serves infra/page/ (plain HTML and one script) and
proxies /api/<function>/<path> to the function URL emulation of
`cargo lambda watch` (http://127.0.0.1:$LAMBDA_PORT/lambda-url/<function>/<path>),
so the page calls the functions from its own origin, with no CORS.

    python -m infra.local.page        serve on 127.0.0.1:$PAGE_PORT (make up)

Only the two functions the page calls are proxied (grab, wallet)
and only the headers the page sends, so the page cannot reach anything
else on the machine."""
import http.server
import pathlib
import threading
import urllib.error
import urllib.request

from infra.local.settings import port

PAGE = pathlib.Path(__file__).resolve().parents[1] / "page"
FUNCTIONS = ("grab", "wallet")
FORWARDED = ("content-type", "x-user-id", "x-user-level", "accept-language")
FILES = {"/": ("index.html", "text/html; charset=utf-8"), "/app.js": ("app.js", "text/javascript; charset=utf-8")}


def handler(lambda_base):
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, status, body, content_type):
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.send_header("cache-control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def _proxy(self, method):
            parts = self.path.split("/", 3)  # "", "api", function, rest
            if len(parts) < 3 or parts[2].split("?")[0] not in FUNCTIONS:
                return self._send(404, b'{"code":"ROUTE_NOT_FOUND"}', "application/json")
            function, rest = parts[2].split("?")[0], parts[3] if len(parts) > 3 else ""
            length = int(self.headers.get("content-length") or 0)
            request = urllib.request.Request(
                f"{lambda_base}/lambda-url/{function}/{rest}",
                data=self.rfile.read(length) if length else None,
                headers={h: self.headers[h] for h in FORWARDED if self.headers.get(h)},
                method=method,
            )
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    status, body, kind = response.status, response.read(), response.headers.get("content-type")
            except urllib.error.HTTPError as e:
                status, body, kind = e.code, e.read(), e.headers.get("content-type")
            except (urllib.error.URLError, TimeoutError):
                status, body, kind = 502, b'{"code":"BUSY","message":"the functions are not served (make up)"}', None
            self._send(status, body, kind or "application/json")

        def do_GET(self):
            if self.path.startswith("/api/"):
                return self._proxy("GET")
            name, kind = FILES.get(self.path.split("?")[0], (None, None))
            if name is None:
                return self._send(404, b"not found", "text/plain")
            self._send(200, (PAGE / name).read_bytes(), kind)

        def _write(self, method):
            if self.path.startswith("/api/"):
                return self._proxy(method)
            self._send(405, b"", "text/plain")

        def do_POST(self):
            self._write("POST")

        def do_PUT(self):
            self._write("PUT")

        def do_DELETE(self):
            self._write("DELETE")

    return Handler


def start(lambda_base, listen_port=0):
    """Serves the page in a background thread; the server (its port is
    `server.server_address[1]`)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", listen_port), handler(lambda_base))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main():
    listen = port("PAGE_PORT")
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", listen), handler(f"http://127.0.0.1:{port('LAMBDA_PORT')}")
    )
    print(f"page: http://127.0.0.1:{listen}/ (the functions: make up; issuance: make pump)", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
