"""Graph-break and recompile costs, and the comparison with eager, through the command line as a user runs
them (subprocesses): `dynascope run`, `dynascope run --compare-eager`, `dynascope report --json/--csv`."""

import csv
import json
import os
import shutil
import sys

import pytest
from support import procs
from support.cli import dynascope_here
from support.invariants import assert_invariants

HERE = os.path.dirname(__file__)
PLANTED = os.path.join(HERE, "..", "capture", "planted_breaks.py")
PAYOFF = os.path.join(HERE, "scripts_payoff.py")
ROW_KEYS = {"source", "calls", "total_us", "per_call_us", "per_step_us", "reason", "fix"}


def dynascope(*args, cwd):
    return procs.run([sys.executable, "-m", "dynascope.cli", *args], cwd=cwd, capture_output=True, check=False,
                          text=True, timeout=600)  # fmt: skip


def report_json(path, cwd):
    result = dynascope_here("report", str(path), "--json", cwd=cwd)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def test_run_shows_graph_breaks_by_cost_and_report_gives_them_as_json_and_csv(tmp_path):
    result = dynascope("run", "--out", "out", "--no-html", PLANTED, "TwoBreaks", "10", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Graph breaks by cost" in result.stdout and "fix:" in result.stdout
    data = report_json(tmp_path / "out", tmp_path)  # the directory: explanation.json beside the trace is read
    rows = [r for r in data["graph_breaks"] if r["calls"]]
    assert len(rows) == 2 and all(set(r) >= ROW_KEYS for r in rows)
    costly, cheap = rows
    assert costly["source"].startswith("planted_breaks.py:") and costly["per_call_us"] > cheap["per_call_us"]
    spun = json.loads(next(line for line in result.stdout.splitlines() if line.startswith("spun "))[5:])
    for row, helper in ((costly, "slow_helper"), (cheap, "other_helper")):
        really = spun[helper][-row["calls"]:]  # what the helper took in the steady calls
        assert row["per_call_us"] == pytest.approx(sum(really) / len(really), rel=0.2)
    # the script steps an optimizer once a call: a step holds one call of each break
    assert costly["per_step_us"] == pytest.approx(costly["per_call_us"], rel=0.25)
    assert "other_helper is marked torch.compiler.disable" in cheap["fix"]
    assert data["compiled_functions"][0]["function"] == "TwoBreaks.forward"
    assert data["recompiles"] == []
    dynascope_here("report", str(tmp_path / "out"), "--csv", str(tmp_path / "csv"), "-q", cwd=tmp_path)
    with open(tmp_path / "csv" / "graph_breaks.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert table[0]["source"] == costly["source"] and table[0]["fix"] == costly["fix"]
    assert table[0]["compile_ids"] == "; ".join(costly["compile_ids"])  # a list, as CSV holds one
    assert_invariants(tmp_path / "out", result.stdout)


@pytest.fixture(scope="module")
def payoff_run(tmp_path_factory):
    """`dynascope run --compare-eager` of a program with a function that compiling speeds up and one that it
    slows down: (its directory, its result, `report --json` of it)."""
    tmp = tmp_path_factory.mktemp("payoff")
    result = dynascope("run", "--out", "out", "--no-html", "--compare-eager", PAYOFF, "both", "40", cwd=tmp)
    assert result.returncode == 0, result.stderr[-3000:]
    return tmp, result, report_json(tmp / "out", tmp)  # report finds out/eager/ and compares again


def test_compare_eager_when_compiling_wins(payoff_run):
    tmp_path, result, data = payoff_run
    assert "Compiled against eager" in result.stdout and "repaid after" in result.stdout
    assert (tmp_path / "out" / "eager").is_dir()
    [row] = [r for r in data["vs_eager"] if r["what"] == "calls of folded"]
    assert row["speedup"] > 2 and not row["noisy"] and row["breakeven_calls"] > 0
    assert "faster" in row["verdict"]
    [fn] = [f for f in data["compiled_functions"] if f["function"] == "folded"]
    assert fn["speedup"] == row["speedup"] and fn["eager_per_call_us"] > fn["median_us"]
    # the eager run's trace is not read as part of the compiled run
    assert len(data["meta"]["files"]) == 1
    assert_invariants(tmp_path / "out", result.stdout)


def test_compare_eager_when_compiling_loses(payoff_run):
    _, _, data = payoff_run
    [row] = [r for r in data["vs_eager"] if r["what"] == "calls of split"]
    assert row["speedup"] < 0.7 and not row["noisy"] and row["breakeven_calls"] is None
    assert "never pays off" in row["verdict"]
    assert len([r for r in data["graph_breaks"] if r["calls"]]) == 4  # the four prints


def test_a_run_without_compare_eager_drops_an_old_eager_run(tmp_path, payoff_run):
    shutil.copytree(payoff_run[0] / "out", tmp_path / "out")  # a directory with an eager run in it
    assert (tmp_path / "out" / "eager").is_dir()
    assert dynascope("run", "--out", "out", "--no-html", PAYOFF, "wins", "6", cwd=tmp_path).returncode == 0
    assert report_json(tmp_path / "out", tmp_path)["vs_eager"] == []


def test_explain_shows_a_saved_explanation_with_the_costs_from_the_trace_beside_it(tmp_path):
    assert dynascope("run", "--out", "out", "--no-html", PLANTED, "DisabledHelper", "6", cwd=tmp_path).returncode == 0
    result = dynascope_here("explain", "out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "This function is optimized by Dynamo" in result.stdout  # the saved explanation, not a new run
    assert "run time: " in result.stdout and "per call" in result.stdout
    assert "Graph breaks by cost" in result.stdout and "slow_helper is marked" in result.stdout
    (tmp_path / "alone").mkdir()
    (tmp_path / "alone" / "explanation.json").write_text((tmp_path / "out" / "explanation.json").read_text())
    alone = dynascope_here("explain", "alone/explanation.json", cwd=tmp_path)
    assert alone.returncode == 0 and "run time:" not in alone.stdout and "no trace beside" in alone.stderr
    bad = dynascope_here("explain", "out/eager.json", cwd=tmp_path)
    assert bad.returncode == 2 and "not" in bad.stderr
    saved = tmp_path / "out" / "explanation.json"
    before = saved.stat().st_mtime_ns
    again = dynascope("explain", "--quiet", "--out", "out", PLANTED, "DisabledHelper", "2", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]  # --out's directory is not the run directory to show
    assert saved.stat().st_mtime_ns > before and "This function" not in again.stdout
