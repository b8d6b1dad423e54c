"""The fault harness of `make chaos`: real parts that fail on command.

- `SqsFaults`: an HTTP proxy between the functions and the SQS endpoint that
  answers SendMessage with 503 while told to (SQS unable to take a message).
- `RedisPair`: a primary and its replicas (real server processes of the
  run's own, of either engine: `Engine("redis")` or `Engine("valkey")`;
  two replicas, as deployed), failed over the way ElastiCache does it: the
  replicas lag, the primary dies, the replica holding the most is promoted
  and the other follows it, and a replacement replica syncs later.
- `RedisProxy`: the endpoint the functions connect to (ElastiCache's primary
  endpoint, a DNS name that moves on failover). It forwards to the current
  primary, drops every connection when the primary changes, and can hold
  the primary's replies back (so a caller is killed after Redis ran its
  command and before the answer reached it).
The grab under Lambda's process model is lambda_host.py.

Nothing here is a mock of the system under test: the functions, Redis and
the AWS endpoint are the same ones `make up` runs.
"""
import http.client
import http.server
import os
import pathlib
import random
import re
import shutil
import socket
import subprocess
import threading
import time

HOST = "127.0.0.1"


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- SQS

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
                    pass  # the caller went away (a retry, a shutdown, a kill)

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


# ---------------------------------------------------------------- Redis

def serverless_lacks():
    """The commands ElastiCache Serverless lacks, which its stand-in renames
    away: read from infra/local/standin.sh, their one home."""
    text = (pathlib.Path(__file__).resolve().parents[2] / "infra" / "local" / "standin.sh").read_text()
    found = re.search(r"SERVERLESS_LACKS=\(([^)]*)\)", text)
    if not found:
        raise RuntimeError("infra/local/standin.sh lists no SERVERLESS_LACKS")
    return found.group(1).split()


class Engine:
    """One of the engines ElastiCache offers, as the binaries that run it:
    `redis` (redis-server, redis-cli) or `valkey` (valkey-server,
    valkey-cli). Their replication differs: since Redis 7.2 and in Valkey a
    `WAIT` counts only the writes of the connection that sends it.

    `valkey-serverless` stands in for ElastiCache Serverless: Valkey without
    the commands Serverless lacks (`serverless_lacks`), `volatile-lru`, a
    5 s script limit; the functions wait for no replica (it has no `WAIT`)
    and keep a told win by its claim in DynamoDB (CACHE_DURABILITY none).
    Its primary and replicas replicate asynchronously, as Serverless's
    nodes do, and a failover loses what they lacked. The commands this
    suite itself sends as an operator (`HARNESS_COMMANDS`) are renamed to
    an alias only it uses, and the replication protocol (SYNC, PSYNC) is
    kept, which Serverless's own nodes use among themselves."""

    BINARIES = {"redis": ("redis-server", "redis-cli"), "valkey": ("valkey-server", "valkey-cli"),
                "valkey-serverless": ("valkey-server", "valkey-cli")}
    HARNESS_COMMANDS = ("REPLICAOF", "SAVE", "KEYS")
    REPLICATION = ("SYNC", "PSYNC")

    def __init__(self, name):
        if name not in self.BINARIES:
            raise ValueError(f"unknown engine {name!r}; known: {', '.join(self.BINARIES)}")
        self.name = name
        self.server, self.cli = self.BINARIES[name]
        self.serverless = name.endswith("-serverless")
        if shutil.which(self.server) is None:
            raise RuntimeError(f"{self.server} is not on the PATH: run make setup")

    def label(self):
        """`redis-7.0`, `valkey-8.0` or `valkey-8.0-serverless`: the engine and
        its version (and the stand-in)."""
        out = subprocess.run([self.server, "--version"], capture_output=True, text=True, timeout=30).stdout
        version = out.split("v=", 1)[1].split()[0] if "v=" in out else "unknown"
        base = self.name.removesuffix("-serverless")
        return f"{base}-{'.'.join(version.split('.')[:2])}" + ("-serverless" if self.serverless else "")

    def command(self, name):
        """The name this suite sends `name` as (its alias on the stand-in)."""
        upper = name.upper()
        return f"STANDIN-{upper}" if self.serverless and upper in self.HARNESS_COMMANDS else name

    def node_args(self):
        """The server's settings beyond the suite's own: the stand-in's."""
        if not self.serverless:
            return []
        args = ["--maxmemory-policy", "volatile-lru", "--busy-reply-threshold", "5000"]
        for c in serverless_lacks():
            if c not in self.REPLICATION:
                args += ["--rename-command", c, self.command(c) if c in self.HARNESS_COMMANDS else ""]
        return args


class RedisNode:
    """One server process of the run's own (of `engine`), controlled by its
    PID."""

    def __init__(self, root, engine, port=None, replica_of=None):
        self.engine = engine
        self.port = port or free_port()
        self.dir = pathlib.Path(root) / f"{engine.name}-{self.port}"
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        self.args = [engine.server, "--port", str(self.port), "--bind", HOST, "--save", "", "--appendonly", "no",
                     "--dir", str(self.dir), *engine.node_args()]
        if replica_of:
            self.args += ["--replicaof", HOST, str(replica_of)]
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.wait_for(lambda info: "redis_version" in info, "to answer")

    def restart(self):
        """Starts the (killed) server again on its port and directory, as a
        primary (a node promoted once was started as a replica): it loads
        the snapshot `SAVE` last wrote there, and nothing after it."""
        if "--replicaof" in self.args:
            at = self.args.index("--replicaof")
            del self.args[at:at + 3]
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.wait_for(lambda info: "loading:0" in info, "back from its snapshot", sections=("persistence",))

    def cli(self, *args):
        if args:
            args = (self.engine.command(args[0]), *args[1:])
        out = subprocess.run([self.engine.cli, "-p", str(self.port), *args], capture_output=True, text=True,
                             timeout=30)
        return out.stdout

    def wait_for(self, ready, what, seconds=30, sections=("replication", "server")):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if ready("".join(self.cli("INFO", section) for section in sections)):
                return
            time.sleep(0.05)
        raise RuntimeError(f"{self.engine.server} on {self.port} did not come {what}")

    def signal(self, sig):
        os.kill(self.proc.pid, sig)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisPair:
    """A primary and its replicas in sync (two by default, as the template
    deploys: ElastiCache with Multi-AZ, two replicas per shard). The
    functions reach the primary through `proxy`; each replica's replication
    stream runs through a `link` of its own, so it can lag."""

    def __init__(self, root, engine, replicas=2):
        self.root, self.engine = root, engine
        self.primary = RedisNode(root, engine)
        self.links, self.replicas = [], []
        for _ in range(replicas):
            self.replicas.append(RedisNode(root, engine, replica_of=self.link_to_primary()))
        self.in_sync()
        self.proxy = RedisProxy(self.primary.port)
        self.failovers = 0

    def link_to_primary(self):
        """A new replication link to the current primary; its port."""
        link = RedisProxy(self.primary.port)
        self.links.append(link)
        return link.port

    def in_sync(self):
        for replica in self.replicas:
            replica.wait_for(lambda info: "master_link_status:up" in info, "in sync")
        wanted = f"connected_slaves:{len(self.replicas)}"
        self.primary.wait_for(lambda info: wanted in info, f"to see its {len(self.replicas)} replica(s)")

    def url(self):
        return f"redis://{HOST}:{self.proxy.port}"

    def cli(self, *args):
        """A command on the current primary (as an operator would run it)."""
        return self.primary.cli(*args)

    def replicas_left(self):
        """How many replicas the primary has now."""
        return len(self.replicas)

    def fail_over(self, lag_seconds, replacement_seconds=0.0, promoted=None):
        """The replication streams stall in the network (the replicas lag:
        every write from now on exists on the primary alone, and a `WAIT`
        sees no acknowledgement); `lag_seconds` later the primary is killed
        and what was in flight to the replicas is lost with it. The replica
        holding the most is promoted (as a cluster's election ranks
        replicas by offset), the other replicas follow it, and the endpoint
        moves to it (every open connection drops; `promoted` is called once
        the followers are in sync). The failed node comes back as a new,
        empty replica `replacement_seconds` later (ElastiCache replaces a
        failed node minutes later)."""
        for link in self.links:
            link.holding.set()
        time.sleep(lag_seconds)
        self.primary.signal(9)  # SIGKILL
        self.primary.proc.wait()
        for link in self.links:
            link.close()
        self.links = []

        def offset(node):
            info = node.cli("INFO", "replication")
            return int(next((line.split(":")[1] for line in info.splitlines()
                             if line.startswith("master_repl_offset:")), "0"))

        best = max(self.replicas, key=offset)
        if "OK" not in best.cli("REPLICAOF", "NO", "ONE"):
            raise RuntimeError("the replica refused promotion")
        old, followers = self.primary, [r for r in self.replicas if r is not best]
        self.primary, self.replicas = best, []
        self.proxy.switch(self.primary.port)
        old.stop()
        for node in followers:
            if "OK" not in node.cli("REPLICAOF", HOST, str(self.link_to_primary())):
                raise RuntimeError("a replica refused its new primary")
            self.replicas.append(node)
        self.in_sync()
        if promoted:
            promoted()
        time.sleep(replacement_seconds)
        self.replicas.append(RedisNode(self.root, self.engine, port=old.port, replica_of=self.link_to_primary()))
        self.in_sync()
        self.failovers += 1

    def restart_from_snapshot(self):
        """Every node is killed (SIGKILL: nothing saved on the way down); the
        primary starts again on its port from the snapshot `SAVE` last wrote
        in its directory, and the replicas come back empty and sync from
        it. What restoring a backup over a live group, or a group that
        persists by RDB losing every node at once, leaves: a consistent
        state older than writes users were told about, on a server whose
        replication history is new."""
        for link in self.links:
            link.close()
        self.links = []
        for node in (self.primary, *self.replicas):
            node.signal(9)
            node.proc.wait()
        count = len(self.replicas)
        for node in self.replicas:
            node.stop()
        self.primary.restart()
        self.replicas = [RedisNode(self.root, self.engine, replica_of=self.link_to_primary()) for _ in range(count)]
        self.in_sync()

    def disconnect_at_random(self, period, stopped):
        """Until `stopped` is set, every `period` seconds on average one open
        connection of the functions is dropped, as ElastiCache Serverless may
        disconnect a client at any time to balance its load."""
        def run():
            rng = random.Random(20261208)
            while not stopped.wait(rng.uniform(0.5, 1.5) * period):
                with self.proxy.lock:
                    pairs = sorted(self.proxy.pairs, key=id)
                if pairs:
                    self.proxy.drop(rng.choice(pairs))
                    self.disconnects += 1
        self.disconnects = 0
        threading.Thread(target=run, daemon=True).start()

    def stop(self):
        self.proxy.close()
        for link in self.links:
            link.close()
        for node in (self.primary, *self.replicas):
            node.stop()


class RedisProxy:
    """A TCP proxy: the primary endpoint's DNS name (for the functions) or
    the network between primary and replica (for the replication link)."""

    def __init__(self, upstream_port):
        self.upstream = upstream_port
        self.holding = threading.Event()
        self.lock = threading.Lock()
        self.pairs = set()
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((HOST, 0))
        self.listener.listen(256)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection((HOST, self.upstream), timeout=5)
            except OSError:
                client.close()  # the primary is down: the caller sees a refused connection
                continue
            server.settimeout(None)
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pair = (client, server)
            with self.lock:
                self.pairs.add(pair)
            threading.Thread(target=self.pipe, args=(client, server, False, pair), daemon=True).start()
            threading.Thread(target=self.pipe, args=(server, client, True, pair), daemon=True).start()

    def pipe(self, src, dst, replies, pair):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                while replies and self.holding.is_set() and pair in self.pairs:
                    time.sleep(0.005)
                if pair not in self.pairs:
                    break  # dropped while held: what it held is lost with it
                dst.sendall(data)
        except OSError:
            pass
        self.drop(pair)

    def drop(self, pair):
        with self.lock:
            self.pairs.discard(pair)
        for s in pair:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def switch(self, port):
        """The endpoint now names `port`; every open connection drops."""
        self.upstream = port
        with self.lock:
            pairs = list(self.pairs)
        for pair in pairs:
            self.drop(pair)

    def close(self):
        self.listener.close()
        self.switch(self.upstream)
