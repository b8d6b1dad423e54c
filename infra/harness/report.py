"""Self-contained HTML reports: of a local sale (`make demo`: presses per
second by outcome, latency percentiles, remaining stock and issued coupons
over time, the grants waiting to be issued, and the stock equation) and of
the fault suite (`make chaos`: what the presses heard and the promise kept,
per fault).

One file, no CDN and no library: the figures travel as JSON inside the page
and a few lines of script draw them as SVG, so the report opens anywhere,
offline, years later. `infra/tests/test_report.py` opens one in headless
Chromium and checks that every chart is drawn.

    from report import render_chaos, timeline, write
    write(path, summary, timeline(presses, samples), equation, ok)
    path.write_text(render_chaos(results, ok))
"""
import html
import json
import math

OUTCOME_COLOURS = {
    "SUCCESS": "#2e7d32",
    "SOLD_OUT": "#9e9e9e",
    "ALREADY_CLAIMED": "#f9a825",
    "RATE_LIMITED": "#ef6c00",
    "BUSY": "#c62828",
    "TRANSPORT_ERROR": "#6a1b9a",
    "GATEWAY_ERROR": "#6d4c41",
    "issued": "#2e7d32",
    "told SUCCESS": "#1565c0",
    "remaining": "#1565c0",
}


def percentile(values, p):
    if not values:
        return 0.0
    values = sorted(values)
    k = (len(values) - 1) * p / 100
    lo, hi = math.floor(k), math.ceil(k)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def timeline(presses, samples, bucket=1.0):
    """Per-second series from the presses, each (seconds since the start,
    outcome code, latency ms), and the figures sampled during the sale, each
    (seconds, remaining, issued, pending)."""
    end = max([t for t, _, _ in presses] + [s[0] for s in samples] + [0.0])
    n = int(end // bucket) + 1
    t = [round(i * bucket, 3) for i in range(n)]
    outcomes = sorted({code for _, code, _ in presses})
    by = {code: [0] * n for code in outcomes}
    lat = [[] for _ in range(n)]
    for at, code, ms in presses:
        i = int(at // bucket)
        by[code][i] += 1
        lat[i].append(ms)
    per_second = {code: [round(c / bucket, 2) for c in counts] for code, counts in by.items()}
    latency = {
        name: [round(percentile(v, p), 2) if v else None for v in lat]
        for name, p in (("p50", 50), ("p90", 90), ("p99", 99))
    }
    return {
        "presses": {"t": t, "series": per_second},
        "latency": {"t": t, "series": latency},
        "stock": {
            "t": [round(s[0], 3) for s in samples],
            "series": {
                "remaining": [s[1] for s in samples],
                "issued": [s[2] for s in samples],
            },
        },
        "waiting": {
            "t": [round(s[0], 3) for s in samples],
            "series": {"won, not yet issued": [s[3] for s in samples]},
        },
    }


CHARTS = [
    ("presses", "Presses per second by outcome", "presses/s"),
    ("latency", "Latency percentiles per second", "ms"),
    ("stock", "Remaining stock and issued coupons", "coupons"),
    ("waiting", "Issuance lag: grants won and not yet issued", "grants"),
]

SCRIPT = r"""
const data = JSON.parse(document.getElementById("data").textContent);
const colours = JSON.parse(document.getElementById("colours").textContent);
const palette = ["#1565c0", "#00838f", "#ad1457", "#ef6c00", "#6a1b9a", "#5d4037"];
const NS = "http://www.w3.org/2000/svg";
function el(name, attrs, parent) {
  const e = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}
function bars(spec, svg, box, W, H, L, R, T, B, unit) {
  const cats = spec.categories, names = Object.keys(spec.series);
  const ymax = Math.max(1, ...names.flatMap(n => spec.series[n]));
  const y = v => T + (H - T - B) * (1 - v / ymax);
  const slot = (W - L - R) / cats.length, bw = Math.max(2, (slot - 8) / names.length);
  el("line", {x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis"}, svg);
  for (let i = 0; i <= 4; i++) {
    const v = ymax * i / 4;
    el("text", {x: L - 6, y: y(v) + 4, "text-anchor": "end", class: "tick"}, svg).textContent = Math.round(v);
  }
  el("text", {x: 8, y: 12, class: "unit"}, svg).textContent = unit;
  const legend = document.createElement("div");
  legend.className = "legend";
  names.forEach((n, i) => {
    const colour = colours[n] || palette[i % palette.length];
    cats.forEach((c, j) => {
      const v = spec.series[n][j];
      el("rect", {x: (L + j * slot + 4 + i * bw).toFixed(1), y: y(v).toFixed(1), width: (bw - 1).toFixed(1),
        height: Math.max(0, H - B - y(v)).toFixed(1), fill: colour, "data-series": n, "data-category": c}, svg);
    });
    const item = document.createElement("span");
    item.innerHTML = `<i style="background:${colour}"></i>${n}`;
    legend.appendChild(item);
  });
  cats.forEach((c, j) => {
    const cx = L + j * slot + slot / 2, cy = H - B + 12;
    el("text", {x: cx, y: cy, "text-anchor": "end", class: "tick", transform: `rotate(-35 ${cx} ${cy})`}, svg)
      .textContent = c;
  });
  box.appendChild(legend);
}
function chart(id, title, unit) {
  const spec = data.charts[id];
  const box = document.getElementById(id);
  const W = 560, H = spec.kind === "bars" ? 300 : 260, L = 56, R = 12, T = 24, B = spec.kind === "bars" ? 76 : 36;
  const svg = el("svg", {viewBox: `0 0 ${W} ${H}`, width: W, height: H, "data-chart": id, role: "img"}, box);
  el("title", {}, svg).textContent = title;
  if (spec.kind === "bars") return bars(spec, svg, box, W, H, L, R, T, B, unit);
  const xs = spec.t;
  const names = Object.keys(spec.series);
  const all = names.flatMap(n => spec.series[n].filter(v => v !== null));
  const xmax = Math.max(1, ...xs), ymax = Math.max(1, ...all);
  const x = v => L + (W - L - R) * v / xmax;
  const y = v => T + (H - T - B) * (1 - v / ymax);
  el("line", {x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis"}, svg);
  el("line", {x1: L, y1: T, x2: L, y2: H - B, class: "axis"}, svg);
  for (let i = 0; i <= 4; i++) {
    const v = ymax * i / 4;
    el("text", {x: L - 6, y: y(v) + 4, "text-anchor": "end", class: "tick"}, svg).textContent =
      v >= 100 ? Math.round(v) : v.toFixed(1);
    const s = xmax * i / 4;
    el("text", {x: x(s), y: H - B + 16, "text-anchor": "middle", class: "tick"}, svg).textContent = s.toFixed(0) + " s";
  }
  el("text", {x: 8, y: 12, class: "unit"}, svg).textContent = unit;
  const legend = document.createElement("div");
  legend.className = "legend";
  names.forEach((n, i) => {
    const colour = colours[n] || palette[i % palette.length];
    const pts = xs.map((t, j) => [t, spec.series[n][j]]).filter(p => p[1] !== null);
    el("polyline", {points: pts.map(p => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" "),
      fill: "none", stroke: colour, "stroke-width": 2, "data-series": n}, svg);
    const item = document.createElement("span");
    item.innerHTML = `<i style="background:${colour}"></i>${n}`;
    legend.appendChild(item);
  });
  box.appendChild(legend);
}
for (const [id, title, unit] of data.order) chart(id, title, unit);
document.body.dataset.rendered = data.order.length;
"""

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #212121; max-width: 1200px; }
h1 { font-size: 22px; margin: 0 0 4px; } .sub { color: #616161; margin-bottom: 16px; }
.grid { display: grid; grid-template-columns: repeat(2, 580px); gap: 16px; }
.card { border: 1px solid #e0e0e0; border-radius: 6px; padding: 8px 10px; }
.card h2 { font-size: 15px; margin: 2px 0 6px; }
.axis { stroke: #9e9e9e; } .tick, .unit { font-size: 11px; fill: #616161; }
.legend span { margin-right: 12px; font-size: 12px; } .legend i { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
table { border-collapse: collapse; margin: 8px 0 16px; } td, th { padding: 3px 10px; border-bottom: 1px solid #eee; text-align: right; }
td:first-child, th:first-child { text-align: left; }
.ok { color: #2e7d32; font-weight: 600; } .bad { color: #c62828; font-weight: 600; }
.eq { font-size: 16px; margin: 8px 0 16px; }
"""


DEMO_OK = "OK: exactly the stock, once each, nothing lost, no coupon spent twice, every change told"


def render(
    summary, series, equation, ok, title="Flash sale, run locally", charts=CHARTS, intro=None, extra="", ok_text=DEMO_OK
):
    """The report as one HTML string: `charts` lists (id, title, unit) of the
    entries of `series` to draw, in order; `equation` may be None."""
    data = {"charts": series, "order": [list(c) for c in charts if c[0] in series]}
    rows = "".join(
        f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(str(v))}</td></tr>" for k, v in summary.items()
    )
    equation_html = ""
    if equation is not None:
        eq = equation
        balance = eq["remaining"] + eq["issued"] + eq["pending"] + eq["rejected"]
        balanced = balance == eq["total"]
        state = "balances" if balanced else "off by %d" % (eq["total"] - balance)
        equation_html = (
            "<h2>The stock equation</h2>"
            f'<div class="eq">total {eq["total"]} = remaining {eq["remaining"]} + issued {eq["issued"]} '
            f'+ pending {eq["pending"]} + rejected {eq["rejected"]} '
            f'<span class="{"ok" if balanced else "bad"}">({state})</span></div>'
        )
    verdict = f'<p class="ok">{html.escape(ok_text)}</p>' if ok else '<p class="bad">FAILED: see the figures</p>'

    intro = intro or (
        "coupon-grab: every press through the local functions, issuance through the event pump, "
        "DynamoDB checked at the end"
    )
    cards = "".join(
        f'<div class="card"><h2>{html.escape(t)}</h2><div id="{i}"></div></div>' for i, t, _ in charts if i in series
    )
    # "</" inside the JSON would end the script element early.
    blob = json.dumps(data).replace("</", "<\\/")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{STYLE}</style></head>
<body>
<h1>{html.escape(title)}</h1>
<div class="sub">{html.escape(intro)}</div>
{verdict}
{equation_html}
<div class="grid">{cards}</div>
<h2>Figures</h2>
<table><tr><th>figure</th><th>value</th></tr>{rows}</table>
{extra}
<script type="application/json" id="data">{blob}</script>
<script type="application/json" id="colours">{json.dumps(OUTCOME_COLOURS)}</script>
<script>{SCRIPT}</script>
</body></html>
"""


def write(path, summary, series, equation, ok, title="Flash sale, run locally"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(summary, series, equation, ok, title), encoding="utf-8")
    return path


CHAOS_CHARTS = [
    ("answers", "What the presses heard, per fault", "answers"),
    ("promise", "Told SUCCESS, and coupons issued, per fault", "coupons"),
]
ZERO = ["oversell", "duplicates", "lost", "rejected_after_success", "early"]


def render_chaos(results, ok):
    """`make chaos`'s page: one sale per fault, what the users heard, and
    the promise (every SUCCESS exactly one coupon) checked per fault."""
    names = list(results)
    codes = sorted({c for r in results.values() for c in r.get("answers", {})})
    series = {
        "answers": {
            "kind": "bars",
            "categories": names,
            "series": {c: [results[n].get("answers", {}).get(c, 0) for n in names] for c in codes},
        },
        "promise": {
            "kind": "bars",
            "categories": names,
            "series": {
                "told SUCCESS": [results[n]["winners"] for n in names],
                "issued": [results[n]["issued"] for n in names],
            },
        },
    }
    summary = {
        n: ", ".join(
            f"{k} {results[n][k]}"
            for k in ["winners", "issued", *ZERO, "drift", "busy", "unavailable_ms", "recovery_ms",
                      "queued_at_fault"]
            if k in results[n]
        )
        for n in names
    }
    faults = "".join(
        f"<h3>{html.escape(n)}</h3><ul>"
        + "".join(
            f"<li>at {f.get('atSecond')} s (press {f.get('atPress')}): {html.escape(str(f.get('what')))}</li>"
            for f in results[n].get("injected", [])
        )
        + "</ul>"
        for n in names
    )
    return render(
        summary,
        series,
        None,
        ok,
        title="Faults, injected for real during local sales",
        charts=CHAOS_CHARTS,
        intro="coupon-grab under make chaos: SQS refusing, processes killed, Redis flushed or failed over mid-sale",
        extra=f"<h2>What was injected, and when</h2>{faults}",
        ok_text="OK: every SUCCESS is exactly one coupon, under every fault",
    )
