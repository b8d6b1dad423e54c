"""Headless Chromium driven over the DevTools protocol on a pipe
(`--remote-debugging-pipe`: commands in on fd 3, answers out on fd 4, each
a JSON message ended by a NUL byte), so a test clicks a page for real with
nothing but Debian's `chromium` and the standard library.

    with Browser() as b:
        b.goto("http://127.0.0.1:9080/")
        b.type("#user", "alice")
        b.click("#show")
        b.wait_for("document.querySelectorAll('#center tr').length > 0", "rows")

A click is the mouse's: the element is scrolled into view and pressed and
released at its centre (Input.dispatchMouseEvent), so the page's own
listeners run as they would for a person; typing inserts text into the
focused field (Input.insertText)."""
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise RuntimeError("no headless browser: install Debian's chromium (infra/local/setup.sh does)")


class Browser:
    def __init__(self, timeout=30):
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="page-check-")
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        flags = [
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
            "--remote-debugging-pipe", f"--user-data-dir={self.profile}", "about:blank",
        ]
        # The shell puts the two pipe ends at fds 3 and 4, where Chromium
        # looks for them.
        script = f'exec "$0" "$@" 3<&{to_chrome_r} 4>&{from_chrome_w}'
        self.proc = subprocess.Popen(
            ["bash", "-c", script, chromium(), *flags],
            pass_fds=(to_chrome_r, from_chrome_w),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._next = 0
        self._answers = {}
        self._cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        target = next(t for t in self.call("Target.getTargets", session=False)["targetInfos"] if t["type"] == "page")
        self.session = self.call(
            "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}, session=False
        )["sessionId"]
        self.call("Page.enable")

    def _read(self):
        buffer = b""
        while True:
            chunk = os.read(self._from_chrome, 65536)
            if not chunk:
                with self._cond:
                    self._answers[None] = "closed"
                    self._cond.notify_all()
                return
            buffer += chunk
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                message = json.loads(raw)
                if "id" in message:
                    with self._cond:
                        self._answers[message["id"]] = message
                        self._cond.notify_all()

    def call(self, method, params=None, session=True):
        self._next += 1
        message = {"id": self._next, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.time() + self.timeout
        with self._cond:
            while message["id"] not in self._answers:
                if None in self._answers:
                    raise RuntimeError("chromium exited")
                left = deadline - time.time()
                if left <= 0:
                    raise TimeoutError(f"chromium did not answer {method}")
                self._cond.wait(left)
            answer = self._answers.pop(message["id"])
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer.get("result", {})

    def eval(self, expression):
        """The value of a JavaScript expression in the page (promises awaited)."""
        out = self.call(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}
        )
        if "exceptionDetails" in out:
            raise RuntimeError(f"{expression}: {out['exceptionDetails'].get('text')}")
        return out["result"].get("value")

    def goto(self, url):
        self.call("Page.navigate", {"url": url})
        self.wait_for("document.readyState === 'complete'", f"{url} to load")

    def wait_for(self, expression, what, timeout=None):
        deadline = time.time() + (timeout or self.timeout)
        while True:
            value = self.eval(expression)
            if value:
                return value
            if time.time() > deadline:
                raise AssertionError(f"the page never showed {what}")
            time.sleep(0.2)

    def click(self, selector):
        box = self.eval(
            f"""(() => {{ const e = document.querySelector({json.dumps(selector)});
                if (!e || e.disabled) return null; e.scrollIntoView({{block: 'center'}});
                const r = e.getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; }})()"""
        )
        if not box:
            raise AssertionError(f"nothing to click at {selector} (absent or disabled)")
        x, y = box
        self.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1})

    def type(self, selector, text):
        """Clicks into the field, selects what it holds and types over it."""
        self.click(selector)
        self.eval(f"document.querySelector({json.dumps(selector)}).select()")
        self.call("Input.insertText", {"text": text})

    def close(self):
        try:
            os.killpg(self.proc.pid, 9)
        except ProcessLookupError:
            pass
        self.proc.wait()
        for fd in (self._to_chrome, self._from_chrome):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
