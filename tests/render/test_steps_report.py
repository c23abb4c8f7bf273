"""The per-step breakdown in `dynascope report` (terminal, --json, --csv, --html) and in the end-of-run
summary, from a synthetic training trace with the issue-15 events (tests/support/step_trace.py)."""

from __future__ import annotations

import csv
import json
import re

import pytest
from support import step_trace as st

from dynascope.analyze.stepparts import PARTS
from dynascope.cli import main as cli_main
from dynascope.render._analysis import summarize_paths
from dynascope.render.html import render_html
from dynascope.render.terminal import short_text, summary_text


@pytest.fixture
def trace(tmp_path):
    tr, _ = st.training_trace()
    return tr.write(tmp_path / "train-4242.pfw.gz", gz=True)


@pytest.fixture
def summary(trace):
    return summarize_paths([trace])


def test_terminal_puts_the_steps_first(trace, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # every column, whatever terminal the tests run in
    assert cli_main(["report", str(trace)]) == 0
    out = capsys.readouterr().out
    first = out.index("Steps: where each step's time goes")
    for later in ("Compile vs run", "Forward vs backward", "Ops", "Layers", "Compiled graphs", "Processes"):
        assert out.index(later) > first, later
    table = out[first : out.index("Slowest steps")]
    header = next(ln for ln in table.splitlines() if "wall" in ln)
    assert re.split(r"\s{2,}", header.strip())[:10] == [
        "step", "wall", "data", "forward", "backward", "optimizer", "I/O", "compile", "other", "compiles",
    ]  # fmt: skip
    assert "epoch" not in header  # automatic steps have none
    step5 = next(ln for ln in table.splitlines() if ln.strip().startswith("5 "))
    assert re.split(r"\s{2,}", step5.strip())[:4] == ["5", "2.1 ms", "2 ms", "34 µs"]
    median = next(ln for ln in table.splitlines() if ln.strip().startswith("median"))
    assert re.split(r"\s{2,}", median.strip())[:3] == ["median", "155 µs", "50 µs"]
    assert any(ln.strip().startswith("p95") for ln in table.splitlines())
    assert "ckpt-3.pt" in table
    slow = out[out.index("Slowest steps") :].splitlines()[1:4]
    assert slow[0].strip() == "step 5 took 2.1 ms (+1.95 ms over the median step): data wait +1.95 ms (data stall)"
    assert "recompile: 1 compile started: 0/1" in slow[2]


def test_json_has_the_parts_the_statistics_and_the_slowest_steps(trace, capsys):
    assert cli_main(["report", str(trace), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert list(doc)[2:5] == ["by_step", "step_stats", "slow_steps"]
    row = doc["by_step"][4]
    assert set(row) >= {
        "epoch", "step", "total_us", "op_us", "op_count", "regions", "data_us", "forward_us", "backward_us",
        "optimizer_us", "io_us", "compile_us", "other_us", "compiles", "saved",
    }  # fmt: skip
    assert row["saved"] == ["/tmp/run/ckpt-3.pt"] and row["io_us"] == 30
    for r in doc["by_step"]:
        assert sum(r[f"{p}_us"] for p in st.PARTS) == r["total_us"]
    stats = {r["part"]: r for r in doc["step_stats"]}
    # eval (no call here ran with grad disabled) among them; comm only where the trace has collectives
    assert list(stats) == ["total", *(p for p in PARTS if p != "comm")]
    assert stats["total"]["median_us"] == 155 and stats["total"]["p95_us"] == 2105
    assert [r["step"] for r in doc["slow_steps"]] == [5, 0, 6]
    assert doc["slow_steps"][0]["why"] == "data wait +1.95 ms (data stall)"


def test_csv_per_table(trace, tmp_path):
    d = tmp_path / "csv"
    assert cli_main(["report", str(trace), "--csv", str(d), "-q"]) == 0
    assert {"by_step.csv", "step_stats.csv", "slow_steps.csv"} <= {p.name for p in d.iterdir()}
    rows = list(csv.DictReader((d / "by_step.csv").open()))
    assert rows[4]["saved"] == "/tmp/run/ckpt-3.pt" and rows[6]["compile_ids"] == "0/1"
    assert [r["part"] for r in csv.DictReader((d / "step_stats.csv").open())][:2] == ["total", "data"]


def test_html_stacked_bars_first(summary):
    html = render_html(summary)
    main = html[html.index("<main>") :]
    assert main.index('<section id="steps">') < main.index('<section id="overview">')
    assert '<a href="#steps">Steps</a>' in html
    chart = html.split('id="chart-step-parts"', 1)[1].split("</svg>", 1)[0]
    bars = re.findall(r'<g class="step-bar"><title>(.*?)</title>(.*?)</g>', chart)
    assert len(bars) == 8
    title5, rects5 = bars[5]
    assert title5.startswith("step 5: wall 2.1 ms · data 2 ms, forward 34 µs, backward 40 µs")
    assert title5.endswith("data wait +1.95 ms (data stall)")
    # the scale stops at 5x the median step: the stalled step is cut, its data wait fills it, its time is written
    assert re.findall(r'class="(sp-[a-z]+)"', rects5) == ["sp-data"]
    assert "2.1 ms</text>" in html and "2 steps cut at 5× the median step" in html
    assert re.findall(r'class="(sp-[a-z]+)"', bars[4][1]) == [
        "sp-data", "sp-forward", "sp-backward", "sp-optimizer", "sp-io", "sp-other",
    ]  # fmt: skip
    # one colour per part, in the legend with its total and share
    legend = html.split('id="chart-step-parts"', 1)[1].split("<svg", 1)[0]
    assert re.findall(r'<i class="(sp-[a-z]+)"></i>', legend) == [f"sp-{p}" for p in st.PARTS if p != "comm"]
    assert "data <b>2.35 ms</b>" in legend
    for p in st.PARTS:
        assert re.search(rf"\.sp-{p} {{[^}}]*fill:", html), p
    # the statistics, the slowest steps, the table of steps (once: not again among the other tables)
    assert 'id="step-stats"' in html and "data wait +1.95 ms (data stall)" in html
    assert html.count('data-table="by-step"') == 1
    # still self-contained under its CSP
    assert "Content-Security-Policy" in html and "http://" not in html.replace("http://www.w3.org", "")
    assert 'id="chart-steps"' not in html


def test_short_summary_has_a_few_step_lines(summary):
    text = short_text(summary, top=2, width=120)  # each line whole (at 100, the piped default, they wrap)
    lines = text.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("Steps: 8"))
    assert lines[i] == "Steps: 8 · median 155 µs, p95 2.1 ms per step"
    assert lines[i + 1].startswith("  time in steps: data 48.8%, compile 33.2%")
    assert lines[i + 2].strip().startswith("step 5 took 2.1 ms")
    assert "Top 2 ops by total time" in text


def test_no_steps_no_step_section(tmp_path):
    tr = st.Trace(7)
    tr.graph_call("forward", st.T0, 10)
    tr.end(st.T0 + 100)
    s = summarize_paths([tr.write(tmp_path / "t-7.pfw")])
    assert "Steps" not in summary_text(s) and "Steps:" not in short_text(s)
    assert '<section id="steps">' not in render_html(s)


def test_convert_links_each_next_to_its_workers_fetch(tmp_path):
    """Flow events (s/f sharing an id) from a worker's dataloader.fetch to the main process's
    dataloader.next of the same (main pid, loader, batch): the latest fetch that began before the next
    ended (a second pass over the loader reuses the batch numbers)."""
    from dynascope.render.chrome import convert

    main = st.Trace(100)
    for ts, batch in ((1000, 0), (2000, 1), (5000, 0)):
        main.event("dataloader.next", "dataloader", st.T0 + ts, 100, {"loader": 3, "batch": batch, "workers": 1})
    main.event("dataloader.next", "dataloader", st.T0 + 7000, 10, {"loader": 3, "batch": None, "workers": 1})
    main.end(st.T0 + 9000)
    worker = st.Trace(200, ppid=100)
    for ts, batch in ((500, 0), (600, 1), (4000, 0), (4100, 1), (6000, 0)):
        worker.event("dataloader.fetch", "dataloader", st.T0 + ts, 40, {"loader": 3, "batch": batch, "worker": 0})
    worker.end(st.T0 + 9000)
    stranger = st.Trace(300, ppid=999)  # another parent's worker: same loader and batch numbers
    stranger.event("dataloader.fetch", "dataloader", st.T0 + 900, 40, {"loader": 3, "batch": 0, "worker": 0})
    stranger.end(st.T0 + 9000)
    paths = [t.write(tmp_path / f"t-{t.pid}.pfw") for t in (main, worker, stranger)]
    stats = convert(paths, tmp_path / "out.json")
    doc = json.loads((tmp_path / "out.json").read_text())
    flows = [e for e in doc["traceEvents"] if e.get("ph") in ("s", "f")]
    assert stats.flows == 3 and doc["otherData"]["batch_flows"] == 3 and len(flows) == 6
    by_id: dict[int, dict] = {}
    for e in flows:
        by_id.setdefault(e["id"], {})[e["ph"]] = e
    pairs = sorted(
        (f["ts"] - st.T0, s["ts"] - st.T0, s["pid"], f["pid"], f["args"]["batch"], f.get("bp"))
        for f, s in ((v["f"], v["s"]) for v in by_id.values())
    )
    assert pairs == [(1099, 500, 200, 100, 0, "e"), (2099, 600, 200, 100, 1, "e"), (5099, 4000, 200, 100, 0, "e")]
    # the flow's ends lie inside the slices they bind to
    slices = {(e["pid"], e["ts"]): e for e in doc["traceEvents"] if e.get("ph") == "X"}
    for v in by_id.values():
        assert (v["s"]["pid"], v["s"]["ts"]) in slices


def test_convert_without_workers_has_no_flows(trace, tmp_path):
    from dynascope.render.chrome import convert

    stats = convert([trace], tmp_path / "out.json")
    doc = json.loads((tmp_path / "out.json").read_text())
    assert stats.flows == 0 and not [e for e in doc["traceEvents"] if e.get("ph") in ("s", "f")]


def test_user_step_regions_are_painted_too(tmp_path):
    """A trace with epoch and step regions and no new events (render_fixtures.build_trace): its steps get
    parts from graph calls and compile alone; the epoch region is no step."""
    from render_fixtures import build_trace

    s = summarize_paths([build_trace(steps=3).write(tmp_path / "train-4242.pfw.gz")])
    assert short_text(s).splitlines()[2].startswith("Steps: 3 · median 4 ms")
    steps = s.by_step.filter(s.by_step["step"].is_not_null())
    assert steps.get_column("forward_us").to_list()[1:] == [2000, 2000]
    assert steps.get_column("backward_us").to_list() == [1000, 1000, 1000]
    html = render_html(s)
    assert '<section id="steps">' in html
    legend = html.split('id="chart-step-parts"', 1)[1].split("<svg", 1)[0]
    assert re.findall(r'<i class="(sp-[a-z]+)"></i>', legend) == ["sp-forward", "sp-backward", "sp-other"]
