"""`dynascope report` through the CLI dispatcher.

The first group stubs the analysis boundary with a Summary of known numbers (render behaviour: JSON,
CSV, HTML, terminal); the second runs the real reader and summarize on a synthetic trace and is skipped
until analysis provides `dynascope.analyze.pipeline`.
"""

from __future__ import annotations

import csv
import importlib.util
import json

import orjson
import pytest
from render_fixtures import EVIL, make_explanation, make_summary

from dynascope.cli import main as cli_main
from dynascope.render import _analysis as render_analysis

HAVE_SUMMARIZE = importlib.util.find_spec("dynascope.analyze.pipeline") is not None


@pytest.fixture
def stub(monkeypatch):
    calls = []

    def fake(paths, top=20, scheduler=None, workers=None, explanation=None, **options):  # beside, library frames
        calls.append({"paths": list(paths), "top": top, "scheduler": scheduler, "workers": workers,
                      "explanation": explanation})
        return make_summary(top=top)

    monkeypatch.setattr(render_analysis, "summarize_paths", fake)  # the one pipeline (render/outputs.py) calls it
    return calls


def test_terminal_tables(stub, trace_file, capsys):
    assert cli_main(["report", str(trace_file), "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert stub == [{"paths": [str(trace_file)], "top": 3, "scheduler": None, "workers": None, "explanation": None}]
    assert "Ops (top 3 of 4)" in out and "function.addmm.default" in out and "function.mm.default" not in out
    assert "Forward vs backward" in out and "\x1b[" not in out


def test_json(stub, trace_file, capsys):
    assert cli_main(["report", str(trace_file), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["by_op"][0]["name"] == "function.addmm.default" and doc["by_op"][0]["total_us"] == 4000.0
    assert [r["phase"] for r in doc["by_phase"]] == ["forward", "backward"]
    assert doc["meta"]["events"] == 20 and doc["top"] == 20
    assert set(doc) >= {"by_op", "by_layer", "by_phase", "by_graph", "by_step", "by_process", "compile_vs_run"}


def test_csv_dir_and_file(stub, trace_file, tmp_path, capsys):
    d = tmp_path / "csv"
    assert cli_main(["report", str(trace_file), "--csv", str(d), "-q"]) == 0
    assert sorted(p.name for p in d.iterdir()) == sorted(
        f"{n}.csv" for n in ("by_op", "by_layer", "by_phase", "by_graph", "by_step", "by_process", "compile_vs_run")
    )
    rows = list(csv.DictReader((d / "by_layer.csv").open()))
    assert rows[1]["layer"] == EVIL and float(rows[0]["backward_us"]) == 400.0
    f = tmp_path / "ops.csv"
    assert cli_main(["report", str(trace_file), "--csv", str(f), "-q"]) == 0
    rows = list(csv.DictReader(f.open()))
    assert [r["name"] for r in rows][:2] == ["function.addmm.default", "function.relu.default"]
    assert "wrote 1 CSV file(s)" in capsys.readouterr().out


def test_html_picks_up_explanation_beside_trace(stub, trace_file, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert cli_main(["report", str(trace_file), "--html", str(out), "-q"]) == 0
    assert 'id="explanation"' not in out.read_text()
    (trace_file.parent / "explanation.json").write_bytes(orjson.dumps(make_explanation()))
    assert cli_main(["report", str(trace_file), "--html", str(out), "-q", "--title", "run <1>"]) == 0
    html = out.read_text()
    assert 'id="graph-breaks"' in html and "<title>run &lt;1&gt;</title>" in html
    assert "with the explanation from" in capsys.readouterr().out


def test_dask_options_pass_through(stub, trace_file):
    assert cli_main(["report", str(trace_file), "--workers", "2", "-q"]) == 0
    assert cli_main(["report", str(trace_file), "--scheduler", "tcp://127.0.0.1:8786", "-q"]) == 0
    assert [(c["workers"], c["scheduler"]) for c in stub] == [(2, None), (None, "tcp://127.0.0.1:8786")]


def test_bad_options_are_one_line_errors(stub, trace_file, tmp_path, capsys):
    assert cli_main(["report", str(trace_file), "--workers", "0"]) == 2
    assert cli_main(["report", str(trace_file), "--html", str(tmp_path / "r.html"), "--explanation", str(tmp_path / "none.json")]) == 2
    assert cli_main(["report", str(trace_file), "--eager", str(tmp_path / "no-eager")]) == 2
    errs = capsys.readouterr().err.strip().splitlines()
    assert len(errs) == 3 and all(e.startswith("dynascope report: error:") for e in errs)
    assert "--workers" in errs[0] and "none.json" in errs[1] and "--eager" in errs[2] and "--compare-eager" in errs[2]
    with pytest.raises(SystemExit):  # argparse: scheduler and workers are exclusive
        cli_main(["report", str(trace_file), "--workers", "2", "--scheduler", "x"])


def test_an_unreadable_explanation_is_one_line_and_the_tables_come_from_the_trace(trace_file, tmp_path, capsys):
    """artifacts/run_dir.py's rule: a damaged file becomes a note; report says it once and goes on."""
    bad = tmp_path / "explanation.json"
    bad.write_text("{not json")
    assert cli_main(["report", str(trace_file), "--explanation", str(bad), "-q"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith(f"could not read {bad}") and "what the trace alone says" in out[0]
    assert cli_main(["report", str(trace_file), "--explanation", str(bad), "-q", "--html", str(tmp_path / "r.html")]) == 0
    said = capsys.readouterr().out
    assert "could not read" in (tmp_path / "r.html").read_text() and "with the explanation from" not in said


@pytest.mark.skipif(not HAVE_SUMMARIZE, reason="dynascope.analyze.pipeline has not landed yet")
def test_end_to_end_real_analysis(trace_file, tmp_path, capsys):
    out = tmp_path / "r.html"
    assert cli_main(["report", str(trace_file), "--json", "--html", str(out)]) == 0
    doc = json.loads(capsys.readouterr().out)
    ops = {r["name"]: r for r in doc["by_op"]}
    # 2 steps: addmm 2 × 1000 µs; the EVIL op 300 + 200 µs
    assert ops["function.addmm.default"]["count"] == 2 and ops["function.addmm.default"]["total_us"] == 2000
    assert ops[f"{EVIL}.Linear_addmm"]["total_us"] == 500
    phases = {r["phase"]: r["total_us"] for r in doc["by_phase"]}
    assert phases["forward"] == 2 * 1000 + 2 * 500 + 500 and phases["backward"] == 2 * 300
    html = out.read_text()
    assert "function.addmm.default" in html and "alert('x')</script>" not in html


@pytest.mark.skipif(not HAVE_SUMMARIZE, reason="dynascope.analyze.pipeline has not landed yet")
def test_piped_subprocess_output_is_plain_and_wide(trace_file):
    import sys

    from support import procs

    proc = procs.run([sys.executable, "-m", "dynascope.cli", "report", str(trace_file), "--top", "3"],
                          capture_output=True, check=False, text=True, timeout=120, env={**__import__("os").environ, "COLUMNS": ""})
    assert proc.returncode == 0, proc.stderr
    assert "\x1b[" not in proc.stdout
    assert "Ops (top 3 of 5)" in proc.stdout
    line = next(ln for ln in proc.stdout.splitlines() if "function.addmm.default" in ln)
    assert "…" not in line and "2 ms" in line  # not squeezed to 80 columns


def test_directory_leaves_out_explanation_and_converted_files(tmp_path):
    from render_fixtures import build_trace

    from dynascope.analyze.read.paths import expand_paths
    from dynascope.errors import TraceFormatError

    run = tmp_path / "run"
    (run / "sub").mkdir(parents=True)
    a = build_trace().write(run / "train-1.pfw.gz")
    b = build_trace(pid=7).write(run / "sub" / "train-7.pfw")
    (run / "explanation.json").write_bytes(orjson.dumps(make_explanation()))
    (run / "train-1.chrome.json").write_text('{"traceEvents": []}')
    (run / "report.html").write_text("<html></html>")
    assert expand_paths([run]) == sorted([a, b])
    assert expand_paths([str(a)]) == [a]  # files pass through untouched
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "explanation.json").write_text("{}")
    with pytest.raises(TraceFormatError, match="no trace files"):
        expand_paths([empty])


def test_the_eager_run_of_a_compare_eager_run_is_found_beside_it_and_not_compared_with_itself(tmp_path):
    from dynascope.render.outputs import eager_beside

    run, eager = tmp_path / "run", tmp_path / "run" / "eager"
    eager.mkdir(parents=True)
    (run / "train-1.pfw.gz").write_bytes(b"")
    (eager / "train-2.pfw.gz").write_bytes(b"")
    assert eager_beside([run]) == eager  # `dynascope report RUN`
    assert eager_beside([run / "train-1.pfw.gz"]) == eager  # or one of its traces
    assert eager_beside([eager]) is None  # `dynascope report RUN/eager`: that run alone
    assert eager_beside([eager / "train-2.pfw.gz"]) is None
