"""The sale's HTML report renders its charts in a real browser: headless
Chromium (Debian's `chromium`, installed by infra/local/setup.sh) loads a report
built by infra/harness/report.py from a recorded sale's shape, runs its script, and
the DOM it dumps must hold every chart with one drawn line per series. The
page needs no network: Chromium runs with it switched off."""
import re
import shutil
import subprocess

import pytest

from infra.harness import report


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("no headless browser: install Debian's chromium (infra/local/setup.sh does)")


def sale():
    """A sale's shape: a burst of presses, wins until the stock runs out,
    then sold out; the stock falling while issuance follows."""
    presses = []
    for i in range(600):
        at = i * 0.01
        code = "SUCCESS" if i < 100 else ("ALREADY_CLAIMED" if i % 50 == 0 else "SOLD_OUT")
        presses.append((at, code, 5.0 + (i % 7)))
    samples = [(t * 0.5, max(0, 100 - t * 20), min(100, t * 15), max(0, min(100, t * 20) - min(100, t * 15))) for t in range(14)]
    return report.timeline(presses, samples)


def render_in_chromium(tmp_path, html):
    page = tmp_path / "report.html"
    page.write_text(html, encoding="utf-8")
    out = subprocess.run(
        [
            chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
            "--virtual-time-budget=5000", "--dump-dom", page.as_uri(),
        ],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_every_chart_is_drawn_with_one_line_per_series(tmp_path):
    series = sale()
    equation = {"total": 100, "remaining": 0, "issued": 100, "pending": 0, "rejected": 0}
    dom = render_in_chromium(tmp_path, report.render({"requests": 600, "issued": 100}, series, equation, ok=True))
    assert 'data-rendered="4"' in dom, "the script ran to the end"
    for chart_id, _, _ in report.CHARTS:
        svg = re.search(rf'<svg[^>]*data-chart="{chart_id}".*?</svg>', dom, re.S)
        assert svg, f"{chart_id}: no chart drawn"
        lines = re.findall(r'<polyline points="([^"]*)"[^>]*data-series="([^"]+)"', svg.group(0))
        assert sorted(name for _, name in lines) == sorted(series[chart_id]["series"]), chart_id
        for points, name in lines:
            assert len(points.split()) >= 2, f"{chart_id}/{name}: a line needs points"
    assert "balances" in dom


def test_an_unbalanced_equation_and_a_failed_run_say_so(tmp_path):
    equation = {"total": 100, "remaining": 1, "issued": 100, "pending": 0, "rejected": 0}
    dom = render_in_chromium(tmp_path, report.render({}, sale(), equation, ok=False))
    assert "off by -1" in dom and "FAILED" in dom


def test_the_page_loads_nothing_from_elsewhere():
    html = report.render({}, sale(), {"total": 1, "remaining": 1, "issued": 0, "pending": 0, "rejected": 0}, ok=True)
    assert not re.search(r'(src|href)="(https?:)?//', html)


def test_the_fault_suites_page_draws_a_bar_per_fault_and_answer(tmp_path):
    results = {
        name: {
            "winners": 60, "issued": 60, "oversell": 0, "duplicates": 0, "lost": 0,
            "rejected_after_success": 0, "drift": 0,
            "answers": {"SUCCESS": 70, "BUSY": busy, "SOLD_OUT": 200},
            "injected": [{"atSecond": 1.5, "atPress": 40, "what": f"{name} begins"}],
        }
        for name, busy in (("sqs_outage", 12), ("redis_flush", 30))
    }
    dom = render_in_chromium(tmp_path, report.render_chaos(results, ok=True))
    assert 'data-rendered="2"' in dom
    bars = re.findall(r'<rect [^>]*data-series="([^"]+)" data-category="([^"]+)"', dom)
    # Three answers and two promise figures, for each of the two faults.
    assert len(bars) == (3 + 2) * 2, bars
    assert {c for _, c in bars} == {"sqs_outage", "redis_flush"}
    assert "redis_flush begins" in dom and "every SUCCESS is exactly one coupon" in dom
