from __future__ import annotations

import importlib.util
import json
import re

import polars as pl
import pytest
from render_fixtures import build_trace, make_summary

from dynascope.cli import diff as command_diff
from dynascope.cli import main as cli_main
from dynascope.render.diff_view import diff_tables, render_diff
from dynascope.render.terminal import make_console

HAVE_SUMMARIZE = importlib.util.find_spec("dynascope.analyze.pipeline") is not None


def after_change():
    """B: addmm twice as fast, mm gone, gelu new, relu unchanged."""
    b = make_summary()
    b.by_op = pl.concat(
        [
            b.by_op.with_columns(
                pl.when(pl.col("name") == "function.addmm.default").then(2000.0).otherwise(pl.col("total_us")).alias("total_us")
            ).filter(pl.col("name") != "function.mm.default"),
            pl.DataFrame({"name": ["function.gelu.default"], "cat": ["dynamo"], "count": [2], "total_us": [300.0],
                          "mean_us": [150.0], "p50_us": [150.0], "p95_us": [150.0], "share": [0.05]}),
        ]
    )
    b.by_layer = b.by_layer.with_columns(
        pl.when(pl.col("layer") == "fc1").then(8800.0).otherwise(pl.col("total_us")).alias("total_us")
    )
    return b


def test_diff_tables_numbers():
    t = diff_tables(make_summary(), after_change())
    ops = {r["name"]: r for r in t["by_op"].to_dicts()}
    assert ops["function.addmm.default"]["delta_us"] == -2000 and ops["function.addmm.default"]["ratio"] == 0.5
    assert ops["function.mm.default"]["count_b"] == 0 and ops["function.mm.default"]["ratio"] == 0.0
    assert ops["function.gelu.default"]["count_a"] == 0 and ops["function.gelu.default"]["ratio"] is None  # B/A, null when A is 0
    assert ops["function.relu.default"]["delta_us"] == 0
    assert t["by_op"]["name"][0] == "function.addmm.default"  # largest change first
    layers = {r["layer"]: r for r in t["by_layer"].to_dicts()}
    assert layers["fc1"]["ratio"] == 2.0
    totals = {r["what"]: r for r in t["totals"].to_dicts()}
    assert totals["op time"]["a_us"] == 6000 and totals["op time"]["b_us"] == 3900


def test_render_diff_says_faster_and_slower():
    import io

    buf = io.StringIO()
    render_diff(diff_tables(make_summary(), after_change()), "a.pfw", "b.pfw", make_console(buf, width=150), top=10)
    text = buf.getvalue()
    line = next(ln for ln in text.splitlines() if "function.addmm.default" in ln and "faster" in ln)
    assert re.split(r"\s{2,}", line.strip()) == ["function.addmm.default", "4", "4", "4 ms", "2 ms", "-2 ms", "0.50×", "faster"]
    assert "gone in B" in text and "new in B" in text
    assert "faster in B: function.addmm.default (2 ms less)" in text
    assert "slower in B: function.gelu.default (300 µs more)" in text
    fc1 = next(ln for ln in text.splitlines() if ln.strip().startswith("fc1"))
    assert "slower" in fc1 and "2.00×" in fc1


def test_cli_diff_json(monkeypatch, tmp_path, capsys):
    summaries = {"A": make_summary(), "B": after_change()}
    monkeypatch.setattr(command_diff, "summarize_paths", lambda paths, top=20, **_: summaries[paths[0]])
    assert cli_main(["diff", "A", "B", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["a"] == "A" and doc["b"] == "B"
    gelu = next(r for r in doc["by_op"] if r["name"] == "function.gelu.default")
    assert gelu["ratio"] is None and gelu["total_b_us"] == 300
    assert cli_main(["diff", "A", "B", "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "Ops (largest 1 of 5 changes)" in out


@pytest.mark.skipif(not HAVE_SUMMARIZE, reason="dynascope.analyze.pipeline has not landed yet")
def test_cli_diff_real_traces(tmp_path, capsys):
    a = build_trace(steps=2).write(tmp_path / "a-1.pfw.gz")
    b = build_trace(steps=4).write(tmp_path / "b-1.pfw.gz")
    assert cli_main(["diff", str(a), str(b), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    addmm = next(r for r in doc["by_op"] if r["name"] == "function.addmm.default")
    assert (addmm["count_a"], addmm["count_b"], addmm["total_a_us"], addmm["total_b_us"]) == (2, 4, 2000, 4000)
