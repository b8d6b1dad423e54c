"""A function binary run the way Lambda runs it, for `make chaos`
(`LambdaHost`): behind a minimal Runtime API, one invocation per process at
a time; a process that dies mid-invocation fails that invocation (API
Gateway answers 502) and is replaced by a fresh one for the next event.
`cargo lambda watch` does not replace a killed process (its invoke API waits
on it forever), so the crash scenario runs the grab here.
"""
import http.server
import json
import os
import pathlib
import queue
import subprocess
import sys
import threading
import time
import uuid

from infra.harness.faults import HOST

def env_file(path):
    values = {}
    for line in pathlib.Path(path).read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            values[key] = value
    return values


class QuietServer(http.server.ThreadingHTTPServer):
    """The Runtime API's server: a process killed mid-request (a crash, or
    a recycled process) resets its connection, which is the point of the
    scenario, not an error to print."""

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)


class Environment:
    """One execution environment: a process and the Runtime API it polls."""

    def __init__(self, host, index):
        self.host, self.index = host, index
        self.current = None  # (request id, reply queue) of the invocation in flight
        self.generation = 0  # one per process started
        self.spent = -1  # the generation that served its one invocation (recycle)
        self.lock = threading.Lock()
        self.proc = None
        env = self

        class RuntimeApi(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                if not self.path.endswith("/invocation/next"):
                    self.send_error(404)
                    return
                generation = env.generation
                while True:
                    # A poll from a process that has since been killed must
                    # not take an event: nobody would answer it. Nor one from
                    # a process that served its one invocation (recycle).
                    if env.generation != generation or host.closed or env.spent == generation:
                        return
                    try:
                        event, reply = host.inbox.get(timeout=0.1)
                    except queue.Empty:
                        continue
                    with env.lock:
                        if env.generation == generation:
                            env.current = (str(uuid.uuid4()), reply)
                            request_id = env.current[0]
                            break
                    host.inbox.put((event, reply))
                    return
                body = json.dumps(event).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Lambda-Runtime-Aws-Request-Id", request_id)
                self.send_header("Lambda-Runtime-Deadline-Ms", str(int(time.time() * 1000) + 30_000))
                self.send_header("Lambda-Runtime-Invoked-Function-Arn",
                                 f"arn:aws:lambda:us-east-1:123456789012:function:{host.name}")
                self.send_header("Lambda-Runtime-Trace-Id", "Root=1-00000000-000000000000000000000000")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with env.lock:
                    current = env.current
                    if current is not None and current[0] in self.path:
                        env.current = None
                    else:
                        current = None
                if current is not None:
                    ok = self.path.endswith("/response")
                    current[1].put((ok, body))
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()
                if current is not None and host.recycle:
                    env.spent = env.generation
                    env.kill()  # the next invocation meets a fresh process

        self.server = QuietServer((HOST, 0), RuntimeApi)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.start()
        threading.Thread(target=self.supervise, daemon=True).start()

    def start(self):
        env = dict(self.host.env, AWS_LAMBDA_RUNTIME_API=f"{HOST}:{self.server.server_address[1]}")
        self.proc = subprocess.Popen([str(self.host.binary)], env=env, stdout=self.host.log, stderr=self.host.log)

    def supervise(self):
        """Lambda's part when a runtime dies: the invocation in flight fails
        and the next event goes to a fresh process (a cold start)."""
        while not self.host.closed:
            if self.proc.poll() is not None:
                with self.lock:
                    current, self.current = self.current, None
                    self.generation += 1
                if current is not None:
                    current[1].put((False, b'{"errorType":"Runtime.ExitError"}'))
                if self.host.closed:
                    return
                self.host.restarts += 1
                self.start()
            time.sleep(0.01)

    def busy(self):
        with self.lock:
            return self.current is not None

    def kill(self):
        """SIGKILL by PID, as a crash or an out-of-memory kill does."""
        try:
            os.kill(self.proc.pid, 9)
        except ProcessLookupError:
            pass


class LambdaHost:
    """`count` environments of one function binary sharing one event queue;
    with `recycle`, each process serves one invocation and is replaced."""

    def __init__(self, name, binary, env, log, count=4, recycle=False):
        self.name, self.binary, self.env, self.log = name, binary, env, log
        # Every invocation on a fresh process (a cold start each time): what
        # a retry meets after Lambda recycled the instance that answered.
        self.recycle = recycle
        self.inbox = queue.Queue()
        self.closed = False
        self.restarts = 0
        self.environments = [Environment(self, i) for i in range(count)]

    def invoke(self, event, timeout=60):
        """(ok, payload bytes); not ok when the function failed or died."""
        reply = queue.Queue()
        self.inbox.put((event, reply))
        try:
            return reply.get(timeout=timeout)
        except queue.Empty:
            return False, b'{"errorType":"Timeout"}'

    def kill_busy(self):
        """Kills every process that is handling an invocation; how many."""
        killed = 0
        for environment in self.environments:
            if environment.busy():
                environment.kill()
                killed += 1
        return killed

    def close(self):
        self.closed = True
        for environment in self.environments:
            environment.kill()
            environment.proc.wait()
            environment.server.shutdown()
