"""The parts of `make bench` outside the Rust process: cold starts and arm64
release sizes; then target/bench/summary.json (the Rust figures plus these).

Cold start: each function binary (profile bench-fast, x86_64: this machine
cannot run arm64) is started against a minimal Lambda Runtime API served
here; the figure is the time from process start to its first response
posted back (configuration, SDK and Redis clients built, one event handled),
the median of several starts. Sizes: `cargo lambda build --release --arm64`,
the `bootstrap` that `sam build` would zip (set BENCH_ARM64=0 to skip it).
"""
import argparse
import http.server
import json
import os
import pathlib
import statistics
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
FUNCTIONS = ["grab", "wallet", "admin", "issuer", "reconciler", "notifier"]


def fixture(name):
    return json.loads((ROOT / "tests" / "fixtures" / name).read_text())


def events():
    wallet = fixture("grab_jwt.json")
    wallet["rawPath"] = wallet["requestContext"]["http"]["path"] = "/me/coupons"
    wallet["requestContext"]["http"]["method"] = "GET"
    wallet["body"] = None
    admin = fixture("admin_iam.json")
    admin["rawPath"] = admin["requestContext"]["http"]["path"] = "/admin/coupons/spring-20"
    admin["requestContext"]["http"]["method"] = "GET"
    admin["body"] = None
    return {
        "grab": fixture("grab_jwt.json"),
        "wallet": wallet,
        "admin": admin,
        "issuer": {"Records": []},
        "reconciler": {},
        "notifier": fixture("notifier_stream.json"),
    }


class RuntimeApi(http.server.BaseHTTPRequestHandler):
    """One invocation: hands out the event, records when the answer comes."""

    event = b"{}"
    served = None
    answered = None
    failed = None

    def log_message(self, *args):
        pass

    def do_GET(self):
        if not self.path.endswith("/invocation/next"):
            self.send_error(404)
            return
        if RuntimeApi.served:
            time.sleep(30)  # the process is killed before this returns
            return
        RuntimeApi.served = time.monotonic()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Lambda-Runtime-Aws-Request-Id", "bench-1")
        self.send_header("Lambda-Runtime-Deadline-Ms", str(int(time.time() * 1000) + 30_000))
        self.send_header("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:123456789012:function:bench")
        self.send_header("Lambda-Runtime-Trace-Id", "Root=1-00000000-000000000000000000000000")
        self.send_header("Content-Length", str(len(RuntimeApi.event)))
        self.end_headers()
        self.wfile.write(RuntimeApi.event)

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        if self.path.endswith("/response"):
            RuntimeApi.answered = time.monotonic()
        else:
            RuntimeApi.failed = body.decode(errors="replace")
        self.send_response(202)
        self.end_headers()


def cold_start(binary, event, env):
    RuntimeApi.event = json.dumps(event).encode()
    RuntimeApi.served = RuntimeApi.answered = RuntimeApi.failed = None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RuntimeApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = dict(env, AWS_LAMBDA_RUNTIME_API=f"127.0.0.1:{server.server_address[1]}")
    start = time.monotonic()
    proc = subprocess.Popen([str(binary)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while RuntimeApi.answered is None and RuntimeApi.failed is None:
            if proc.poll() is not None:
                raise RuntimeError(f"{binary.name} exited: {proc.stderr.read().decode()[-500:]}")
            if time.monotonic() - start > 60:
                raise RuntimeError(f"{binary.name} did not answer in 60 s")
            time.sleep(0.0005)
        if RuntimeApi.failed is not None:
            raise RuntimeError(f"{binary.name} reported an error: {RuntimeApi.failed[:300]}")
        return (RuntimeApi.answered - start) * 1000
    finally:
        proc.kill()
        proc.wait()
        server.shutdown()


def function_env(state):
    """Fresh, empty tables and queues: a cold start measures the start and
    one event, not a reconciliation of the benchmark's own leftovers."""
    cold = state / "cold.env"
    subprocess.run(
        [sys.executable, "-m", "infra.local.provision", "--prefix", "cold-", "--env-file", str(cold)],
        check=True,
        stdout=subprocess.DEVNULL,
        cwd=ROOT,
    )
    env = dict(os.environ)
    for line in cold.read_text().splitlines():
        k, _, v = line.partition("=")
        env[k] = v
    env.update(
        REDIS_URL=os.environ["BENCH_REDIS_URL"],
        AWS_LAMBDA_FUNCTION_NAME="bench",
        AWS_LAMBDA_FUNCTION_MEMORY_SIZE="512",
        AWS_LAMBDA_FUNCTION_VERSION="$LATEST",
        AWS_LAMBDA_LOG_STREAM_NAME="bench",
        AWS_LAMBDA_LOG_GROUP_NAME="bench",
        AWS_LAMBDA_LOG_FORMAT="JSON",
        RUST_LOG="error",
        ADMIN_LOCAL_MODE="false",
        TRUST_IDENTITY_HEADERS="false",
    )
    return env


def arm64_sizes():
    if os.environ.get("BENCH_ARM64", "1") == "0":
        return None, "skipped (BENCH_ARM64=0)"
    cmd = [str(ROOT / ".venv" / "bin" / "cargo-lambda"), "lambda", "build", "--release", "--arm64"]
    for f in FUNCTIONS:
        cmd += ["-p", f]
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        return None, f"cargo lambda build failed: {done.stderr[-400:]}"
    sizes = {f: (ROOT / "target" / "lambda" / f / "bootstrap").stat().st_size for f in FUNCTIONS}
    return sizes, f"built in {time.monotonic() - started:.0f} s"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--state", required=True)
    parser.add_argument("--starts", type=int, default=int(os.environ.get("BENCH_COLD_STARTS", "5")))
    args = parser.parse_args()
    state = pathlib.Path(args.state)
    env = function_env(state)
    evs = events()
    cold = {}
    for f in FUNCTIONS:
        binary = ROOT / "target" / "bench-fast" / f
        runs = [cold_start(binary, evs[f], env) for _ in range(args.starts)]
        cold[f] = round(statistics.median(runs), 1)
    sizes, how = arm64_sizes()

    out = ROOT / "target" / "bench"
    summary = json.loads((out / "rust.json").read_text())
    summary["cold_start_ms"] = cold
    summary["cold_start_note"] = (
        f"median of {args.starts} starts, x86_64 bench-fast binary, process start to first response, "
        "local Redis and moto"
    )
    summary["arm64_release_bytes"] = sizes
    summary["arm64_release_note"] = how
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True))
    for f in FUNCTIONS:
        size = f"{sizes[f] / 1e6:.1f} MB" if sizes else how
        print(f"  {f:<11} cold start {cold[f]:>7.1f} ms   arm64 release {size}")
    print(f"wrote {out / 'summary.json'}")
    # Ratios of two runs on this machine: they move with the machine (two
    # machines of one kind gave 22.3 and 4.1 for the lock baseline), so they
    # are reported, not judged (docs/performance.md).
    print("  ratios (this machine, this run; not targets):")
    for name in ("grab_vs_redis_benchmark", "grab_vs_lock_baseline", "soldout_speedup"):
        print(f"    {name:<29} {summary[name]:8.2f}")
    # What a press costs Redis, the same on any machine: what sizes a
    # campaign's cluster. Round trips are counted; CPU is judged as a ratio
    # to a GET measured in the same run (the absolute figure moves 2.5x
    # between machines of one kind, the ratio does not). (figure, bound,
    # "at most")
    print(f"  Redis CPU, this run: a GET {summary['redis_cpu_us_per_get']:.1f} us, "
          f"a refusal {summary['redis_cpu_us_per_refusal']:.1f} us, "
          f"a win {summary['redis_cpu_us_per_win']:.1f} us "
          f"({summary['redis_cpu_win_vs_get']:.1f}x a GET)")
    print("  costs per press (targets):")
    checks = {
        "redis_round_trips_per_loser": (summary["redis_round_trips_per_loser"], 1),
        "redis_round_trips_per_winner": (summary["redis_round_trips_per_winner"], 3),
        "redis_cpu_refusal_vs_get": (summary["redis_cpu_refusal_vs_get"], 4),
    }
    missed = [name for name, (value, bound) in checks.items() if value > bound]
    for name, (value, bound) in checks.items():
        print(f"    {name:<29} {value:8.2f}  target <= {bound:<5} {'MISSED' if name in missed else 'ok'}")
    print(f"  oversell                      {summary['oversell']:8d}")
    if summary["oversell"] != 0:
        sys.exit(1)
    # Round trips are counted, not timed: a miss is a change in the code.
    if any(name.startswith("redis_round_trips") for name in missed):
        sys.exit("bench: a press costs more round trips than its target")


if __name__ == "__main__":
    main()
