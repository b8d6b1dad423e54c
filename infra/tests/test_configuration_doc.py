"""docs/configuration.md against the code: every variable a function reads
is in the table, every variable in the table is read, a default written as
a number in the code is the one the table gives, and every variable the
template sets on a function is one the code reads (a misspelt name there
would silently fall back to the default)."""
import re

from infra.tests.cfn import FUNCTIONS, ROOT, template

# Read by the Lambda runtime or the SDKs, not by the project's code.
RUNTIME = {"AWS_LAMBDA_LOG_FORMAT", "AWS_LAMBDA_LOG_LEVEL", "RUST_LOG", "AWS_REGION"}
# Set by the template and read by nothing: a new value starts new
# instances (an edge secret's rotation), which read the secret afresh.
RESTARTS = {"EDGE_SECRET_GENERATION"}

READ = re.compile(r'env\s*\.(number|flag|required|optional)\(\s*"([A-Z][A-Z0-9_]{2,})"(?:\s*,\s*([^,)]+))?')
# A helper that reads a variable for its caller: `queue_url(env, "GRANT_QUEUE_URL")`.
HELPER = re.compile(r'\(\s*env\s*,\s*"([A-Z][A-Z0-9_]{2,})"')


def read_by_code():
    """Each variable the functions' and shared crates' code reads, with the
    literal default of every `env.number` read of it."""
    found = {}
    sources = [*(ROOT / "functions").rglob("*.rs"), *(ROOT / "shared").rglob("*.rs")]
    for path in sources:
        text = path.read_text()
        for m in READ.finditer(text):
            found.setdefault(m.group(2), set()).add((m.group(1), (m.group(3) or "").strip()))
        for m in HELPER.finditer(text):
            found.setdefault(m.group(1), set()).add(("helper", ""))
    return found


def documented():
    """Each variable of the tables in docs/configuration.md: its default
    cell, and whether its row names it alone."""
    rows = {}
    for line in (ROOT / "docs" / "configuration.md").read_text().splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        names = re.findall(r"`([A-Z][A-Z0-9_]+)`", cells[0])
        # Three columns (variable, default, meaning), or four with the
        # functions that read it second.
        default = cells[2] if len(cells) >= 4 else cells[1]
        for name in names:
            rows[name] = (default, len(names) == 1)
    return rows


def test_every_variable_the_code_reads_is_documented_and_every_documented_one_is_read():
    code, doc = set(read_by_code()), set(documented())
    assert code - doc == set(), "read by the code, missing from docs/configuration.md"
    assert doc - code - RUNTIME - RESTARTS == set(), "in docs/configuration.md, read by no code"


def test_a_numeric_default_in_the_code_is_the_one_the_table_gives():
    doc = documented()
    wrong = []
    for name, reads in read_by_code().items():
        if name not in doc or not doc[name][1]:
            continue
        for kind, default in reads:
            literal = default.replace("_", "")
            if kind != "number" or not literal.isdigit():
                continue
            cell = doc[name][0]
            first = re.match(r"\d+", cell.replace(",", ""))
            if not first or first.group(0) != literal:
                wrong.append(f"{name}: the code's default is {literal}, the table says {cell!r}")
    assert wrong == []


def test_every_variable_the_template_sets_on_a_function_is_one_the_code_reads():
    code = set(read_by_code()) | RUNTIME | RESTARTS
    resources = template()["Resources"]
    unknown = {}
    for function, resource in FUNCTIONS.items():
        variables = resources[resource]["Properties"].get("Environment", {}).get("Variables", {})
        extra = set(variables) - code
        if extra:
            unknown[function] = sorted(extra)
    assert unknown == {}
