"""Time charged to the right part of a step on a real run (issue 25, defect 4): tests/capture/scripts/
eval_checkpoint.py evaluates under torch.no_grad and saves a checkpoint inside a step, between the batch and
the training forward, under `dynascope run`. The save is the step's I/O (not forward), the no-grad calls its
eval (not forward), and the parts still add up to each step's wall time, in every output."""

from __future__ import annotations

import csv
import json
import os
import re
import sys

import pytest
from support import procs, tracecheck
from support.invariants import assert_invariants

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "eval_checkpoint.py")
PARTS = ("data", "forward", "eval", "backward", "optimizer", "io", "compile", "other")


def _cli(*args: str) -> str:
    done = procs.run([sys.executable, "-m", "dynascope.cli", *args], capture_output=True, text=True, timeout=600,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("evalio")
    out = tmp / "out"
    stdout = _cli("run", "--out", str(out), "--no-explain", SCRIPT, "--out", str(tmp / "ckpt"))
    said = next(json.loads(line) for line in stdout.splitlines() if line.startswith("{"))
    traces = sorted(str(p) for p in out.iterdir() if p.name.endswith(".pfw.gz"))
    main = next(t for t in traces if any(e.get("name") == "optimizer.step" for e in tracecheck.load(t)))
    return {"stdout": stdout, "said": said, "traces": traces, "events": tracecheck.load(main), "out": out, "tmp": tmp}


def _window_of(events: list[dict], step: int) -> tuple[int, int]:
    """Automatic step `step`: from the previous optimizer.step's end to its own (step 0: not needed here)."""
    ends = sorted(e["ts"] + e["dur"] for e in events if e.get("name") == "optimizer.step")
    return ends[step - 1], ends[step]


def test_save_is_io_and_no_grad_calls_are_eval(run):
    said, events = run["said"], run["events"]
    assert said["evaluated"] and said["saved"]
    steps = {r["step"]: r for r in json.loads(_cli("report", *run["traces"], "--json"))["by_step"]}
    assert sorted(steps) == list(range(said["steps"]))
    for r in steps.values():
        assert sum(r[f"{p}_us"] for p in PARTS) == r["total_us"], r
    for k in said["evaluated"]:
        a, b = _window_of(events, k)
        inside = [e for e in events if e.get("ph") == "X" and a <= e["ts"] < b]
        (save,) = [e for e in inside if e.get("name") == "torch.save"]
        no_grad = [e for e in inside if e.get("cat") == "dynamo.graph" and e["args"].get("grad_enabled") == 0
                   and not e["name"].endswith(".backward")]  # fmt: skip
        with_grad = [e for e in inside if e.get("cat") == "dynamo.graph" and e["name"].endswith(".forward")]
        r = steps[k]
        assert r["saved"] and os.path.basename(r["saved"][0]) == f"ckpt-{k}.pt"
        # the whole save is I/O (less any compile that overlaps it: none does), none of it forward
        assert r["io_us"] >= save["dur"] > 0, (r, save)
        assert len(no_grad) == 2 and len(with_grad) == 1
        # the no-grad calls are eval, less what ranks above them inside them (a file read, a compile: none, so far)
        above = [e for e in inside if e.get("cat") in ("POSIX", "torch.io", "dynamo.compile")
                 and any(c["ts"] <= e["ts"] < c["ts"] + c["dur"] for c in no_grad)]  # fmt: skip
        assert r["eval_us"] >= sum(e["dur"] for e in no_grad) - sum(e["dur"] for e in above) > 0, r
        # forward is the training forward's call and the eager code around it, nowhere near the save + eval
        assert r["forward_us"] < with_grad[0]["dur"] + 0.5 * (save["dur"] + sum(e["dur"] for e in no_grad)), r
    for k in set(steps) - set(said["evaluated"]):
        assert steps[k]["eval_us"] == 0 and not steps[k]["saved"], steps[k]


def test_eval_is_a_part_in_every_output(run):
    traces, tmp = run["traces"], run["tmp"]
    # "time in steps: compile n%, ..., eval n%, ...", which may wrap (up to the slowest steps' lines)
    shares = re.split(r"\n  step |\nI/O", run["stdout"].split("time in steps:", 1)[1])[0]
    shares = re.sub(r"\s+", " ", shares)  # a wrap falls between "eval" and its share: keep them apart
    assert re.search(r"\beval <?[0-9.]+%", shares), shares
    text = _cli("report", *traces)
    header = next(line for line in text.splitlines() if line.strip().startswith("step") and "wall" in line)
    assert "eval" in header.split()
    _cli("report", *traces, "--csv", str(tmp / "csv"), "-q")
    with open(tmp / "csv" / "by_step.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert "eval_us" in rows[0] and any(int(r["eval_us"]) > 0 for r in rows)
    with open(tmp / "csv" / "step_stats.csv", newline="") as handle:
        assert [r["part"] for r in csv.DictReader(handle)] == ["total", *PARTS]
    html = (run["out"] / "report.html").read_text()
    assert 'class="sp-eval"' in html


def test_the_eval_and_checkpoint_run_holds_every_invariant(run):
    assert_invariants(run["out"], run["stdout"])
