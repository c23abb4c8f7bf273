"""The compile figures of one real `dynascope run` agree in every file it writes (issue 25, defects 1-2):
explanation.json carries the trace's per-compile times (torch's own kept as timers_s), and the cache
entries table accounts for compiles that left no cache entry (a resume function Dynamo skipped), so that
its rows add up to the compile total in the terminal, JSON, CSV and HTML."""

import json
import sys
import textwrap

import pytest
from support import procs
from support.cli import dynascope_here
from support.invariants import assert_invariants
from support.tracecheck import trace_files

SCRIPT = textwrap.dedent("""
    import torch


    @torch.compile(backend="eager")
    def f(x):
        y = x.sin() + 1
        torch._dynamo.graph_break()  # the resume function after it holds no ops: Dynamo skips it
        return y


    for _ in range(3):
        f(torch.randn(4))
    print("done")
""")


def dynascope(*args, cwd):
    return procs.run([sys.executable, "-m", "dynascope.cli", *args], cwd=cwd, capture_output=True, check=False,
                          text=True, timeout=600)  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("compile-figures")
    (tmp / "brk.py").write_text(SCRIPT)
    result = dynascope("run", "--out", "out", "brk.py", cwd=tmp)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "done" in result.stdout
    report = dynascope_here("report", "--json", "--csv", str(tmp / "csv"), "out", cwd=tmp)
    assert report.returncode == 0, report.stderr[-3000:]
    return {"dir": tmp, "out": tmp / "out", "stdout": result.stdout, "json": json.loads(report.stdout)}


def _compile_rows(data):
    return {r["compile_id"]: r["total_us"] for r in data["compile_vs_run"] if r["kind"] == "compile"}


def test_explanation_json_carries_the_traces_compile_times(run):
    rows = _compile_rows(run["json"])
    assert len(rows) == 2  # f (0/0) and its resume function (1/0)
    data = json.loads((run["out"] / "explanation.json").read_text())
    times = {ct["compile_id"]: ct for ct in data["compile_times"]}
    assert set(times) == set(rows)
    for cid, us in rows.items():
        assert times[cid]["total_s"] == us / 1e6  # the trace's figure, to the µs
        assert times[cid]["timers_s"] is not None and times[cid]["timers_s"] > 0  # torch's own, kept
    # the function's own explanation says the same
    (fn,) = data["explanations"]
    for ct in fn["compile_times"]:
        assert ct["total_s"] == rows[ct["compile_id"]] / 1e6
    # read again (dynascope explain DIR applies the trace once more): torch's figure is not lost
    explain = dynascope_here("explain", "out", cwd=run["dir"])
    assert explain.returncode == 0, explain.stderr[-3000:]
    total = sum(rows.values()) / 1e6
    assert f"2 compiles, {total:.3f} s in all; wall clock from the run's trace" in explain.stdout


def test_cache_entries_add_up_to_the_compile_total(run):
    data = run["json"]
    rows = _compile_rows(data)
    entries = data["cache_entries"]
    assert [e["compile_id"] for e in entries[:-1]] == ["0/0"]
    last = entries[-1]  # the resume function left no cache entry: Dynamo skipped it (no ops)
    assert (last["compile_id"], last["kind"]) == ("1/0", "none")
    assert last["compile_us"] == rows["1/0"]
    assert sum(e["compile_us"] for e in entries) == data["meta"]["compile_us"] == sum(rows.values())
    with open(run["dir"] / "csv" / "cache_entries.csv") as fh:
        assert "no cache entry" in fh.read()
    report = dynascope_here("report", "out", cwd=run["dir"])
    assert report.returncode == 0, report.stderr[-3000:]
    table = report.stdout.split("Cache entries", 1)[1].split("\n\n\n", 1)[0]
    assert "no cache entry" in table and "1/0" in table
    assert "no cache entry" in (run["out"] / "report.html").read_text()
    assert_invariants(run["out"], run["stdout"])


def test_a_failed_compile_is_named_on_the_row(run):
    """With the explanation saying a compile failed, the row says which (the trace alone does not know)."""
    from dynascope.render._analysis import summarize_paths

    traces = trace_files(str(run["out"]))
    explanation = {"compile_times": [{"compile_id": "1/0", "function": "f", "status": "failed"}]}
    last = summarize_paths(traces, explanation=explanation).cache_entries.to_dicts()[-1]
    assert (last["compile_id"], last["function"]) == ("1/0", "no cache entry (1/0 failed)")
