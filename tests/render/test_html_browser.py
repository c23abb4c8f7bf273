"""The HTML report in real headless Chromium, driven over the DevTools protocol.

Asserts that the page renders its tables and charts, logs no console errors (CSP violations
included), requests nothing but its own file, runs no injected script, and that sorting works.
A screenshot lands in the test's tmp dir (set DYNASCOPE_SCREENSHOT=path to keep one elsewhere).
"""

from __future__ import annotations

import importlib.util
import os

import orjson
import pytest
from render_fixtures import EVIL, build_trace, make_explanation, make_summary
from support.render_cdp import HeadlessChromium, find_chromium

from dynascope.cli import main as cli_main
from dynascope.render.html import write_html

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(find_chromium() is None, reason="chromium is not on PATH (apt-get install -y chromium)"),
]


@pytest.fixture(scope="module")
def browser():
    with HeadlessChromium(timeout=120) as b:
        yield b


@pytest.fixture(scope="module")
def loaded_page(browser, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser")
    report = write_html(make_summary(), tmp / "report.html", explanation=make_explanation())
    url = report.resolve().as_uri()
    page = browser.open(url)
    shot = os.environ.get("DYNASCOPE_SCREENSHOT") or str(tmp / "report.png")
    page.screenshot(shot)
    return page, url, shot


def test_renders_tables_and_charts(loaded_page):
    page, _, shot = loaded_page
    ids = page.evaluate("Array.from(document.querySelectorAll('table[data-table]')).map(t => t.dataset.table)")
    assert ids == ["by-op", "by-layer", "by-graph", "by-step", "by-process"]
    first_op = page.evaluate("document.querySelector('#by-op tbody tr td').textContent")
    assert first_op == "function.addmm.default"
    assert page.evaluate("document.querySelectorAll('#chart-steps svg rect').length") == 4  # 2 steps × (wall, ops)
    assert page.evaluate("document.querySelectorAll('#chart-layers .hbars .track').length") == 3
    # explanation sections
    for section in ("explanation", "graph-breaks", "recompiles", "compile-times", "functions"):
        assert page.evaluate(f"!!document.getElementById('{section}')"), section
    # the layout really has width (CSS applied, not a blank page)
    assert page.evaluate("document.querySelector('#by-op table').getBoundingClientRect().width") > 600
    assert os.path.getsize(shot) > 10_000


def test_no_console_errors_and_no_network(loaded_page):
    page, url, _ = loaded_page
    assert page.console_errors == []
    assert page.requests == [url]


def test_injected_html_stays_text(loaded_page):
    page, _, _ = loaded_page
    assert page.dialogs == []
    assert page.evaluate("document.scripts.length") == 1  # only our own sorting script
    assert page.evaluate(f"document.body.textContent.includes({EVIL!r})")
    layer_cells = page.evaluate("Array.from(document.querySelectorAll('#by-layer tbody td.code')).map(td => td.textContent)")
    assert EVIL in layer_cells


def test_click_sorts_table(loaded_page):
    page, _, _ = loaded_page
    col = "Array.from(document.querySelectorAll('#by-op tbody tr')).map(r => r.cells[2].textContent)"
    before = page.evaluate(col)
    assert before == ["4", "2", "2", "2"]
    # click "op" (text column): ascending by name
    page.evaluate("document.querySelector('#by-op thead th').click()")
    names = page.evaluate("Array.from(document.querySelectorAll('#by-op tbody tr')).map(r => r.cells[0].textContent)")
    assert names == sorted(names, key=str.lower)
    # click "total" twice: descending then ascending
    page.evaluate("document.querySelectorAll('#by-op thead th')[3].click()")
    totals = page.evaluate("Array.from(document.querySelectorAll('#by-op tbody tr')).map(r => r.cells[3].textContent)")
    assert totals == ["4 ms", "1 ms", "600 µs", "400 µs"]
    page.evaluate("document.querySelectorAll('#by-op thead th')[3].click()")
    totals = page.evaluate("Array.from(document.querySelectorAll('#by-op tbody tr')).map(r => r.cells[3].textContent)")
    assert totals == ["400 µs", "600 µs", "1 ms", "4 ms"]
    assert page.console_errors == []


@pytest.mark.skipif(importlib.util.find_spec("dynascope.analyze.pipeline") is None, reason="analysis has not landed")
def test_report_from_a_real_trace_via_cli(browser, tmp_path):
    """trace file → `dynascope report --html` (reader, summarize, explanation beside it) → Chromium."""
    trace = build_trace(steps=3).write(tmp_path / "train-4242.pfw.gz")
    (tmp_path / "explanation.json").write_bytes(orjson.dumps(make_explanation()))
    out = tmp_path / "report.html"
    assert cli_main(["report", str(trace), "--html", str(out), "-q"]) == 0
    page = browser.open(out.resolve().as_uri())
    assert page.console_errors == [] and page.requests == [out.resolve().as_uri()] and page.dialogs == []
    rows = page.evaluate("Array.from(document.querySelectorAll('#by-op tbody tr')).map(r => [r.cells[0].textContent, r.cells[2].textContent])")
    assert rows[0] == ["function.addmm.default", "3"]
    assert [f"{EVIL}.Linear_addmm", "3"] in rows
    # a trace's steps have their parts: one stacked bar per step, before the other sections
    assert page.evaluate("document.querySelectorAll('#chart-step-parts svg g.step-bar').length") == 3
    assert page.evaluate("document.querySelector('main > section').id") == "steps"
    assert page.evaluate("document.querySelectorAll('#chart-steps').length") == 0
    assert page.evaluate("document.scripts.length") == 1
