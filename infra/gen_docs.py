"""Writes the parts of the docs that restate code, from the code: the
metric table of docs/configuration.md from the `Metric` enum
(shared/domain/src/metrics.rs, each variant's doc comment). `make docs`
runs it; `infra/tests/test_generated_docs.py` fails when a generated part
is stale, so a metric added or renamed without `make docs` fails CI."""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
METRICS_RS = ROOT / "shared/domain/src/metrics.rs"
CONFIGURATION = ROOT / "docs/configuration.md"
BEGIN = "<!-- metrics: generated from shared/domain/src/metrics.rs by `make docs` -->"
END = "<!-- end of metrics -->"


def metric_docs(src=None):
    """(name, function, dimension or None, what it counts) of each `Metric`
    variant, in the enum's order, from its doc comment
    (`/// reconciler, by `Coupon`: shards rebuilt from DynamoDB.`)."""
    src = src if src is not None else METRICS_RS.read_text()
    body = src.split("pub enum Metric {", 1)[1].split("\n}\n", 1)[0]
    found, comment = [], []
    for line in body.splitlines():
        line = line.strip()
        if line.startswith("///"):
            comment.append(line[3:].strip())
        elif re.fullmatch(r"\w+,", line):
            text = " ".join(comment)
            m = re.match(r"(\w+)(?:, by `(\w+)`)?: (.+)", text)
            assert m, f"{line} has no `function[, by `Dimension`]: what` comment: {text!r}"
            found.append((line[:-1], m.group(1), m.group(2), m.group(3)))
            comment = []
    return found


def metrics_table(src=None):
    rows = ["| metric | emitted by | split by | counts |", "| --- | --- | --- | --- |"]
    for name, function, dim, what in metric_docs(src):
        rows.append(f"| `{name}` | {function} | {f'`{dim}`' if dim else ''} | {what} |")
    return "\n".join(rows)


def with_metrics(doc, table):
    """`doc` with the text between the markers replaced by `table`."""
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table}\n{END}{tail}"


def main():
    doc = CONFIGURATION.read_text()
    new = with_metrics(doc, metrics_table())
    if new != doc:
        CONFIGURATION.write_text(new)
        print(f"wrote {CONFIGURATION.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
