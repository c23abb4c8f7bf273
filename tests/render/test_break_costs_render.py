"""The graph-break and recompile tables as every renderer shows them: terminal (wide and narrow), HTML,
JSON and CSV, from a trace of known numbers (frame_trace.py)."""

from __future__ import annotations

import csv
import io
import re

from support.frame_trace import FILE, Trace

import dynascope
from dynascope.console import make_console
from dynascope.render._analysis import summary_to_dict, write_csv
from dynascope.render.html import render_html
from dynascope.render.terminal import render_costs, render_short

EXPLANATION = {
    "graph_breaks": [{"reason": "Skip calling `torch.compiler.disable()`d function", "file": FILE, "line": 12,
                      "function": "forward", "compile_ids": ["0/0"], "count": 1, "excerpt": "12   x = helper(x)",
                      "detail": "Explanation: <script>alert(1)</script>\\n  Hint: Remove the `torch.compiler.disable` call"}],
}  # fmt: skip


def summary(tmp_path):
    tr = Trace()
    for k in range(4):
        tr.one_break_call(10_000 * k, helper_us=2000)
    return dynascope.summarize_files([str(tr.write(tmp_path))], explanation=EXPLANATION)


def text_of(fn, s, width):
    buf = io.StringIO()
    fn(s, make_console(buf, width=width, color=False))
    return buf.getvalue()


def test_terminal_table_and_narrow_blocks(tmp_path):
    s = summary(tmp_path)
    wide = text_of(render_costs, s, 160)
    assert "Graph breaks by cost" in wide and "model.py:12" in wide and "2.01 ms" in wide
    assert "fix: helper is marked torch.compiler.disable" in wide
    narrow = text_of(render_costs, s, 80)
    assert "1. model.py:12\n     hits 3, per call 2.01 ms" in narrow
    assert max(len(line.rstrip()) for line in narrow.splitlines()) <= 80 and "│" not in narrow
    assert "whether compiling paid off: dynascope run --compare-eager" in text_of(render_short, s, 160)


def test_html_shows_the_break_beside_its_source_and_escapes_what_torch_said(tmp_path):
    page = render_html(summary(tmp_path), explanation=EXPLANATION)
    assert 'id="break-costs"' in page and "x = helper(x)" in page and "2.01 ms" in page
    assert "helper is marked torch.compiler.disable" in page
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;" in page
    assert "2.01 ms per call" in page  # the explanation's list of breaks, with the cost beside the excerpt
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids)), "every anchor the navigation links to is unique"
    assert 'href="#compiled-functions"' in page and 'id="compiled-functions"' in page


def test_json_and_csv_rows(tmp_path):
    s = summary(tmp_path)
    data = summary_to_dict(s)
    [row] = data["graph_breaks"]
    assert {k: row[k] for k in ("source", "calls", "total_us", "per_call_us", "per_step_us")} == {
        "source": "model.py:12", "calls": 3, "total_us": 3 * 2010, "per_call_us": 2010.0, "per_step_us": None}
    assert row["reason"].startswith("Skip calling") and row["fix"] and row["detail"].startswith("Explanation")
    assert data["recompiles"] == [] and data["compiled_functions"][0]["function"] == "M.forward"
    written = write_csv(s, tmp_path / "csv")
    assert tmp_path / "csv" / "graph_breaks.csv" in written
    with open(tmp_path / "csv" / "graph_breaks.csv", newline="") as fh:
        [line] = list(csv.DictReader(fh))
    assert line["source"] == "model.py:12" and line["compile_ids"] == "0/0"
