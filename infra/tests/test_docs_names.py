"""What the docs name, against the repository: each Rust item written as
`module::name` in README.md and docs/ (a test, a handler, a function) is
one function at that module path, so `cargo test` on a cited test runs it;
each file a doc cites exists; each file under infra/ is named on
infra/README.md. A renamed test or a moved file fails here, not in a
reader's hands."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SOURCES = [p for d in ("tests", "shared", "functions") for p in (ROOT / d).rglob("*.rs") if "target" not in p.parts]
NAMED = re.compile(r"`([a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)+)`")
FN = re.compile(r"\bfn\s+([a-z_][a-z0-9_]*)")
MOD = re.compile(r"\bmod\s+([a-z_][a-z0-9_]*)")


def module_path(path):
    """The module path of a source file as `cargo test` filters by it:
    `tests/integration/reconcile/losses.rs` is `reconcile::losses`,
    `shared/domain/src/grab/tests/mod.rs` is `grab::tests`; a function's
    crate (`grab` for `functions/grab/`, `domain` for `shared/domain/`) may
    lead it, as docs write `grab::handle`."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[:2] == ["tests", "integration"]:
        crate, parts = None, parts[2:]
    else:
        crate, parts = parts[1], parts[parts.index("src") + 1 :] if "src" in parts else parts[2:]
    parts = [p for p in parts if p not in ("mod", "lib", "main")]
    return crate, parts


def functions():
    """Each function name, with the module paths it is defined at (each
    also under its crate's name, the alias's first part)."""
    found = {}
    for path in SOURCES:
        crate, parts = module_path(path)
        for name in FN.findall(path.read_text(encoding="utf-8")):
            found.setdefault(name, []).append(parts + [name])
            if crate:
                found[name].append([crate] + parts + [name])
    return found


def references():
    for doc in DOCS:
        for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for ref in NAMED.findall(line):
                yield f"{doc.relative_to(ROOT)}:{n}", ref


def unresolved(refs, fns):
    """The references (where, `a::b::name`) that are not the end of the
    module path of exactly one function `name` (nor a module's path), so
    that `cargo test a::b::name` runs the test a doc cites and no other."""
    modules = {tuple(p[:-1][: i + 1]) for paths in fns.values() for p in paths for i in range(len(p) - 1)}
    missing = []
    for where, ref in refs:
        path = [m for m in ref.split("::") if not m.startswith("coupon_")]
        # The function's path without its crate alias: one per definition.
        ends = {tuple(p) for p in fns.get(path[-1], []) if p[-len(path) :] == path}
        ends = {e for e in ends if not any(len(o) < len(e) and e[-len(o) :] == o for o in ends)}
        if len(ends) == 1 or tuple(path) in modules or any(m[-len(path) :] == tuple(path) for m in modules):
            continue
        missing.append(f"{where}: `{ref}`" + (" (more than one)" if ends else ""))
    return missing


def test_the_docs_name_rust_items_that_exist_where_they_say():
    refs = list(references())
    assert len(refs) > 50, "the pattern no longer finds the docs' references"
    missing = unresolved(refs, functions())
    assert missing == [], "named by the docs, found in no such module:\n" + "\n".join(missing)


def test_a_renamed_or_moved_test_is_caught():
    fns = functions()
    refs = [
        ("here", "risk::a_press_refused_at_its_commit_is_refused_for_every_copy"),
        ("renamed", "risk::a_press_refused_at_its_commit_is_refused_for_no_copy"),
        ("moved", "failover::a_press_refused_at_its_commit_is_refused_for_every_copy"),
    ]
    assert unresolved(refs, fns) == [
        "renamed: `risk::a_press_refused_at_its_commit_is_refused_for_no_copy`",
        "moved: `failover::a_press_refused_at_its_commit_is_refused_for_every_copy`",
    ]


PATH_DOCS = [*DOCS, ROOT / "infra" / "README.md"]
CITED_PATH = re.compile(r"`([A-Za-z0-9_./-]+\.(?:rs|lua|py|md|yaml|yml|toml|json|sh|html))`")
# Written by a run, not kept in the repository.
GENERATED = ("target/", ".local/")
# Another project's source, named as the place of its bug.
ELSEWHERE = {"cargo-lambda-watch/src/state.rs"}


def cited_paths(files=None):
    import subprocess

    files = files or set(subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split())
    names = {Path(f).name for f in files}
    missing = []
    for doc in PATH_DOCS:
        for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for cited in CITED_PATH.findall(line):
                if cited.startswith(GENERATED) or cited in ELSEWHERE:
                    continue
                here = str(doc.parent.relative_to(ROOT) / cited).removeprefix("./")
                found = cited in files or here in files if "/" in cited else cited in names
                if not found:
                    missing.append(f"{doc.relative_to(ROOT)}:{n}: `{cited}`")
    return missing


def test_every_file_a_doc_cites_is_in_the_repository():
    assert cited_paths() == []


def test_a_file_cited_but_gone_is_caught():
    files = {"lua/grab.lua", "infra/local/env.sh"}
    missing = cited_paths(files)
    assert "docs/architecture.md" in " ".join(missing), "fence.lua is cited there and absent from this list"
    assert not any("`lua/grab.lua`" in m for m in missing)


def unmapped(files, readme):
    """The files under infra/ that infra/README.md does not name."""
    return sorted(f for f in files if f.startswith("infra/") and Path(f).name not in ("__init__.py", "README.md") and Path(f).name not in readme)


def test_every_file_under_infra_is_named_in_its_readme():
    import subprocess

    files = subprocess.run(["git", "ls-files", "infra"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert len(files) > 30
    assert unmapped(files, (ROOT / "infra" / "README.md").read_text(encoding="utf-8")) == []


def test_a_new_file_under_infra_left_off_its_readme_is_caught():
    assert unmapped(["infra/harness/new_fault.py", "infra/local/start.sh"], "`start.sh`") == ["infra/harness/new_fault.py"]
