"""docs/protocol.md's Redis key table against the one place the keys are
made, `shared/adapters/src/redis/keys.rs`: every key the code builds is a
row, and every row is a key the code builds, compared by shape (the hash
tag's kind and the fixed words; ids, days and the prefix are holes). A key
added, renamed or dropped in the code without its row fails here."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KEYS_RS = ROOT / "shared/adapters/src/redis/keys.rs"
DOC = ROOT / "docs/protocol.md"

FORMAT = re.compile(r'format!\(\s*"([^"]+)"')


def unformat(fmt):
    """A `format!` string with its arguments as holes: `{}{{usr:{}}}` is
    `_{usr:_}` (read left to right, as `format!` does)."""
    out, i = [], 0
    while i < len(fmt):
        pair = fmt[i : i + 2]
        if pair in ("{{", "}}", "{}"):
            out.append({"{{": "{", "}}": "}", "{}": "_"}[pair])
            i += 2
        else:
            out.append(fmt[i])
            i += 1
    return "".join(out)


def code_shapes(text):
    """The shape of every key `keys.rs` formats: `{usr:_}:holds:_`. The
    shard keys are formatted on the shard's tag (`{cpn:_:_}`); the prefix
    every key starts with is dropped."""
    tag = None
    suffixes, whole = [], []
    for fmt in FORMAT.findall(text):
        shape = unformat(fmt)
        if shape.startswith("_{"):
            shape = shape[1:]  # the prefix
            if shape.startswith("{cpn:") and shape.endswith("}"):
                tag = shape  # the shard's tag itself
                continue
            whole.append(shape)
        elif shape.startswith("_:"):
            suffixes.append(shape[1:])  # on the shard's tag
    assert tag, "keys.rs formats no shard tag"
    return {*whole, *(tag + s for s in suffixes)}


def doc_shapes(text):
    """The shape of every key in the doc's table under `## Redis key layout`:
    `{usr:U}:holds:<day>` is `{usr:_}:holds:_`."""
    section = text.split("## Redis key layout", 1)[1].split("\n## ", 1)[0]
    shapes = set()
    for line in section.splitlines():
        m = re.match(r"\|\s*`([^`]+)`\s*\|", line)
        if not m:
            continue
        key = re.sub(r"<[^>]+>", "_", m.group(1))
        key = re.sub(r"\{(\w+)((?::[^:}]+)*)\}", lambda t: "{" + t.group(1) + ":_" * t.group(2).count(":") + "}", key)
        shapes.add(key)
    return shapes


def test_the_redis_key_table_names_exactly_the_keys_the_code_builds():
    code = code_shapes(KEYS_RS.read_text())
    doc = doc_shapes(DOC.read_text())
    assert code - doc == set(), f"keys the code builds that the table lacks: {sorted(code - doc)}"
    assert doc - code == set(), f"rows for keys the code does not build: {sorted(doc - code)}"


def test_a_key_renamed_in_the_code_is_caught():
    text = KEYS_RS.read_text().replace('"{}{{usr:{}}}:holds:{}"', '"{}{{usr:{}}}:claims:{}"')
    assert "{usr:_}:claims:_" in code_shapes(text) - doc_shapes(DOC.read_text())


def test_a_row_for_a_key_the_code_never_builds_is_caught():
    doc = DOC.read_text().replace(
        "| `{reconcile}:settled` |", "| `{cpn:C:s}:gone` | hash | nothing |\n| `{reconcile}:settled` |"
    )
    assert "{cpn:_:_}:gone" in doc_shapes(doc) - code_shapes(KEYS_RS.read_text())
