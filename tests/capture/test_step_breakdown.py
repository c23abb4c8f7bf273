"""The per-step breakdown of a real training run: tests/capture/scripts/whole_step.py (a DataLoader over
torch.save'd samples, a compiled model, a real optimizer, a checkpoint per epoch) under `dynascope run`,
then `dynascope report --json` and `dynascope convert` on what it wrote.

Without user regions every optimizer.step closes a step (docs/trace-format.md, "Steps"): the report has
one step per optimizer step, and each step's parts add up to its wall time exactly (µs integers)."""

from __future__ import annotations

import itertools
import json
import os
import sys

import pytest
from support import procs, tracecheck
from support.invariants import assert_invariants

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "whole_step.py")
PARTS = ("data", "forward", "eval", "backward", "optimizer", "io", "compile", "other")


def _run(tmp_path, *args):
    out = tmp_path / "out"
    command = [sys.executable, "-m", "dynascope.cli", "run", "--out", str(out), "--no-html", "--no-explain", SCRIPT,
               "--data", str(tmp_path / "data"), *args]  # fmt: skip
    done = procs.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    said = next(json.loads(line) for line in done.stdout.splitlines() if line.startswith("{"))
    traces = sorted(str(p) for p in out.iterdir() if p.name.endswith(".pfw.gz"))
    assert_invariants(out, done.stdout)
    return done.stdout, said, traces


def _cli(*args) -> str:
    done = procs.run([sys.executable, "-m", "dynascope.cli", *args], capture_output=True, text=True, timeout=300,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.parametrize(("workers", "optimizer"), [(0, "sgd"), (2, "adam")])
def test_steps_of_a_real_loop(tmp_path, workers, optimizer):
    out, said, traces = _run(tmp_path, "--workers", str(workers), "--optimizer", optimizer, "--samples", "16")
    assert f"Steps: {said['steps']} · median" in out  # the end-of-run summary
    doc = json.loads(_cli("report", *traces, "--json"))
    steps = doc["by_step"]
    assert [r["step"] for r in steps] == list(range(said["steps"]))
    assert all(r["epoch"] is None for r in steps)
    for r in steps:
        assert sum(r[f"{p}_us"] for p in PARTS) == r["total_us"], r
        assert r["data_us"] > 0 and r["forward_us"] > 0 and r["backward_us"] > 0 and r["optimizer_us"] > 0, r
    # the wall time of a step, measured apart from the analysis: from one optimizer.step's end to the next's
    main = next(t for t in traces if any(e.get("name") == "optimizer.step" for e in tracecheck.load(t)))
    ends = [e["ts"] + e["dur"] for e in tracecheck.load(main) if e.get("name") == "optimizer.step"]
    walls = [b - a for a, b in itertools.pairwise(ends)]
    assert all(abs(r["total_us"] - wall) <= 1 for r, wall in zip(steps[1:], walls, strict=True))  # µs rounding
    assert steps[0]["compile_us"] > 0 and steps[0]["compiles"] >= 1
    # the checkpoint saved after the last step of epoch 0 is I/O of the first step of epoch 1
    per_epoch = said["steps"] // said["epochs"]
    assert steps[per_epoch]["io_us"] > 0
    assert [r["part"] for r in doc["step_stats"]] == ["total", *PARTS]
    assert doc["slow_steps"] and doc["slow_steps"][0]["step"] == 0  # the step that compiles
    if workers:
        stats = _cli("convert", *traces, "-o", str(tmp_path / "trace.json"))
        assert stats  # it says what it wrote
        exported = json.loads((tmp_path / "trace.json").read_text())
        assert exported["otherData"]["batch_flows"] == said["batches"]
