"""The crate boundaries the architecture relies on, checked from the
manifests: the domain depends on no Redis, AWS or Lambda crate, the HTTP
edge on no Redis or AWS crate, and every function's main.rs stays a thin
entry point (the handler and the wiring live in its library); and, from the
sources, no two modules of the domain import each other (through any
chain)."""
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FORBIDDEN = re.compile(r"^(redis|aws[-_].*|lambda[-_].*)$")


def tree(package):
    """Every crate `package` builds with (normal dependencies), by name."""
    out = subprocess.run(
        ["cargo", "tree", "-p", package, "-e", "normal", "--prefix", "none", "--offline"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[:500]
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


def test_the_domain_depends_on_no_redis_aws_or_lambda_crate():
    crates = tree("coupon-domain")
    assert "coupon-domain" in crates
    assert not {c for c in crates if FORBIDDEN.match(c)}, crates


def test_the_http_edge_depends_on_no_redis_or_aws_crate():
    crates = tree("coupon-edge")
    assert "lambda_http" in crates
    assert not {c for c in crates if c == "redis" or c.startswith("aws-sdk")}, crates


@pytest.mark.parametrize("main", sorted((ROOT / "functions").glob("*/src/main.rs")), ids=lambda p: p.parts[-3])
def test_every_main_is_a_thin_entry_point(main):
    text = main.read_text()
    assert len(text.splitlines()) <= 40, main
    assert "wire(" in text, f"{main} builds its function through its crate's wire()"
    assert not re.search(r"\b\d{2,}\b", text), f"{main} has a number literal: settings belong in Config"


def domain_imports():
    """Each top-level module of the domain and the top-level modules its
    non-test code names (`crate::<module>`, in code or doc links alike)."""
    src = ROOT / "shared" / "domain" / "src"
    graph = {}
    for path in src.rglob("*.rs"):
        rel = path.relative_to(src)
        if rel.parts[0] == "testing" or path.name == "tests.rs" or rel == pathlib.Path("lib.rs"):
            continue
        module = rel.parts[0].removesuffix(".rs")
        code = path.read_text().split("#[cfg(test)]")[0]
        names = set(re.findall(r"crate::([a-z_]+)", code))
        graph.setdefault(module, set()).update(names - {module, "testing"})
    return graph


def test_no_module_of_the_domain_imports_one_that_imports_it_back():
    graph = domain_imports()
    assert {"grab", "reconcile", "admin", "coupon", "audit", "live"} <= graph.keys(), graph.keys()

    def cycle_from(start):
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in graph.get(node, ()):
                if nxt == start:
                    return path + [start]
                if nxt not in path:
                    stack.append((nxt, path + [nxt]))
        return None

    cycles = [c for m in sorted(graph) if (c := cycle_from(m))]
    assert not cycles, " ; ".join(" -> ".join(c) for c in cycles)
