from __future__ import annotations

import io
import re

import polars as pl
from render_fixtures import EVIL, make_summary

from dynascope.analyze.summary import Summary
from dynascope.render import _fmt
from dynascope.render.terminal import make_console, render_summary, short_text, summary_text


def test_fmt_units():
    assert _fmt.fmt_us(840) == "840 µs"
    assert _fmt.fmt_us(2.5) == "2.5 µs"
    assert _fmt.fmt_us(12_300) == "12.3 ms"
    assert _fmt.fmt_us(4_560_000) == "4.56 s"
    assert _fmt.fmt_us(125_000_000) == "2 min 5 s"
    assert _fmt.fmt_us(None) == "–"
    assert _fmt.fmt_share(0.5) == "50.0%"
    assert _fmt.fmt_share(0.0001) == "<0.1%"
    assert _fmt.fmt_int(1234567) == "1,234,567"
    assert _fmt.fmt_ratio(float("inf")) == "new"


def test_full_summary_has_every_table_and_numbers(summary):
    text = summary_text(summary)
    for title in ("Compile vs run", "Forward vs backward", "Ops", "Layers", "Compiled graphs", "Steps", "Processes"):
        assert title in text, title
    # header facts
    assert "files 1" in text and "events 20" in text and "span 70 ms" in text and "processes 1" in text
    # the op table row for addmm: count 4, total 4 ms, mean 1 ms, p50 900 µs, p95 1.5 ms, share 66.7%
    line = next(ln for ln in text.splitlines() if "function.addmm.default" in ln)
    for cell in ("4", "4 ms", "1 ms", "900 µs", "1.5 ms", "66.7%"):
        assert cell in re.split(r"\s{2,}", line.strip()), (cell, line)
    # forward vs backward headline
    assert "forward 5.6 ms (93.3%)" in text and "backward 400 µs (6.7%)" in text
    assert "compile 50 ms (83.3%)" in text
    # markup-looking names print verbatim, not interpreted
    assert EVIL in text
    # no ANSI escapes when not a terminal
    assert "\x1b[" not in text


def test_top_limits_rows_and_says_so():
    s = make_summary(top=2)
    text = summary_text(s)
    assert "Ops (top 2 of 4)" in text
    assert "function.mm.default" not in text


def test_short_summary(summary):
    text = short_text(summary, top=2)
    assert "Top 2 ops by total time" in text
    assert "function.addmm.default" in text and "function.relu.default" in text
    assert "function.mm.default" not in text
    assert "forward 5.6 ms" in text
    assert "Layers" not in text and "dynamo" not in text  # no cat column in the short form


def test_empty_and_partial_summary_do_not_crash():
    empty = Summary(*(pl.DataFrame() for _ in range(7)))
    assert "no events to summarise" in summary_text(empty)
    # a frame missing some columns renders the ones it has
    partial = make_summary()
    partial.by_op = partial.by_op.drop("p95_us", "cat")
    text = summary_text(partial)
    assert "p95" not in text and "function.addmm.default" in text


def test_console_on_pipe_is_colourless_and_a_log_files_width(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    buf = io.StringIO()
    console = make_console(buf)
    assert console.width == 100
    render_summary(make_summary(), console)
    assert "\x1b[" not in buf.getvalue()


def test_package_exports_resolve():
    from dynascope import render

    for name in render.__all__:
        assert callable(getattr(render, name)), name
    assert render.render_short is render_summary.__globals__["render_short"]


def test_render_never_imports_torch():
    import subprocess
    import sys

    code = (
        "import sys, dynascope.render.html, dynascope.render.chrome, dynascope.render.terminal, "
        "dynascope.render.diff_view, dynascope.cli.report, dynascope.cli.convert, "
        "dynascope.cli.view, dynascope.cli.diff; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=False, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_columns_env_sets_pipe_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert make_console(io.StringIO()).width == 200
