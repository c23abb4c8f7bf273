"""by_file on a real run: tests/capture/scripts/whole_step.py (samples torch.save'd by the main process, read
with open + torch.load by two DataLoader workers each epoch, a checkpoint torch.save'd per epoch) under
`dynascope run`, in a subprocess; this process reads the traces without torch."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import warnings
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from support import procs
from support.invariants import assert_invariants

import dynascope
import dynascope.analyze.partial_build as PB
from dynascope.analyze.pipeline import finish, merge, summarize_files

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="the run needs torch")

TESTS = Path(__file__).resolve().parents[1]
SCRIPT = TESTS / "capture" / "scripts" / "whole_step.py"
SRC = Path(dynascope.__file__).resolve().parents[1]  # absolute: the child runs this checkout


def test_files_of_a_real_training_run(tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    samples, epochs = 8, 2
    command = [sys.executable, "-m", "dynascope.cli", "run", "--out", str(out), "--no-html", "--no-explain",
               str(SCRIPT), "--data", str(data), "--workers", "2", "--samples", str(samples), "--epochs", str(epochs)]  # fmt: skip
    env = {**{k: v for k, v in os.environ.items() if k != "COLUMNS"},  # piped, a log file's width (another
           "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}  # test's may leak)
    done = procs.run(command, capture_output=True, text=True, timeout=600, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "I/O: " in done.stdout  # the end-of-run line
    assert_invariants(out, done.stdout)
    traces = sorted(str(p) for p in out.iterdir() if p.name.endswith(".pfw.gz"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = summarize_files(traces)
    rows = {r["fname"]: r for r in s.by_file.iter_rows(named=True)}
    for i in range(samples):
        r = rows[str(data / f"sample-{i}.pt")]
        size = (data / f"sample-{i}.pt").stat().st_size
        # saved once by the main process (torch's C++ writer: the save's bytes), loaded once per epoch by a
        # worker through Python's open (the raw reads: the zip reader reads parts of the file again)
        assert (r["saves"], r["loads"], r["opens"], r["writes"]) == (1, epochs, epochs, 0), r
        assert r["bytes_written"] == size and r["bytes_read"] >= epochs * size, r
        assert r["reads"] >= epochs and r["load_us"] > 0 and r["total_us"] >= r["load_us"], r
        assert r["workers"] >= 1 and r["processes"] == r["workers"] + 1, r  # the main process and workers
        assert r["compile_events"] == 0, r
    for epoch in range(epochs):
        r = rows[str(data / f"checkpoint-{epoch}.pt")]
        assert (r["saves"], r["processes"], r["workers"], r["loads"], r["reads"]) == (1, 1, 0, 0, 0), r
        assert r["bytes_written"] == (data / f"checkpoint-{epoch}.pt").stat().st_size
    assert abs(s.by_file.get_column("share").sum() - 1.0) < 1e-9
    # the general reader agrees with the fast path on the real files
    general = finish(merge([PB.general_file_partial(p) for p in traces]))
    assert_frame_equal(s.by_file, general.by_file, check_exact=True)


NANOGPT = Path(__file__).resolve().parent / "scripts" / "nanogpt_files.py"


def _run_nanogpt(tmp_path: Path, backend: str, *extra: str) -> tuple[str, list[str]]:
    data, out = tmp_path / "data", tmp_path / "out"
    command = [sys.executable, "-m", "dynascope.cli", "run", "--out", str(out), "--no-html", "--no-explain",
               str(NANOGPT), "--data", str(data), "--backend", backend, *extra]  # fmt: skip
    env = {**{k: v for k, v in os.environ.items() if k != "COLUMNS"},  # piped, a log file's width (another
           "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}  # test's may leak)
    done = procs.run(command, capture_output=True, text=True, timeout=900, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_invariants(out, done.stdout)
    return done.stdout, sorted(str(p) for p in out.iterdir() if p.name.endswith(".pfw.gz"))


@pytest.mark.parametrize("backend", ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)])
def test_the_programs_files_first_on_a_nanogpt_style_run(tmp_path, backend):
    """A nanoGPT-style run (tests/analyze/scripts/nanogpt_files.py): its data, meta and checkpoint files
    are the first rows; Python's imports (every installed package's entry_points.txt, torch's sources),
    dynascope's own files and the pipes are one row each below them, adding up to the files' totals; the
    pipes' waiting (a child's output; inductor's compile workers) is neither file I/O nor compile I/O."""
    from dynascope.render._fmt import file_view, io_line

    inductor = backend == "inductor"
    stdout, traces = _run_nanogpt(tmp_path, backend, *(() if inductor else ("--pipe",)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = summarize_files(traces)
    rows = s.by_file.to_dicts()
    groups = [r["group"] for r in rows]
    data = tmp_path / "data"
    mine = [r["fname"] for r in rows if r["group"] == "program" and r["compile_events"] < r["events"]]
    assert {str(data / "val.bin"), str(data / "meta.pkl"), str(data / "ckpt.pt")} <= set(mine), mine
    # the program's files first: every other row (a group or a library's file) comes after all of them
    assert groups[0] == "program" and rows[0]["fname"] in mine
    last_program = max(i for i, g in enumerate(groups) if g == "program")
    assert all(g == "program" for g in groups[: last_program + 1]), groups
    val = rows[[r["fname"] for r in rows].index(str(data / "val.bin"))]
    assert val["opens"] >= 3 and val["compile_events"] == 0  # a memmap per batch
    # one row per group, nothing of theirs as a row of its own
    assert groups.count("python") == 1 and groups.count("dynascope") == 1 and groups.count("pipes") == 1, groups
    assert not [r["fname"] for r in rows if "dist-info" in r["fname"] or r["fname"].startswith(("pipe:", "socket:"))]
    by_group = {r["group"]: r for r in rows if r["group"] not in ("program", "other")}
    assert by_group["python"]["files"] >= 10 and by_group["python"]["reads"] >= 10
    assert by_group["dynascope"]["fname"].startswith("(dynascope: ")
    # the groups add up to the files' own numbers
    files = merge([PB.general_file_partial(p) for p in traces]).file
    for c in ("events", "reads", "bytes_read", "writes", "bytes_written", "total_us", "compile_events", "compile_us"):
        assert s.by_file.get_column(c).sum() == files.get_column(c).sum(), c
    assert s.by_file.get_column("files").sum() == files.height
    # the pipes: the last row, waiting (no share), out of the I/O time and the compile-only line
    pipes = rows[-1]
    assert pipes["group"] == "pipes" and pipes["share"] is None and pipes["total_us"] > 0
    if inductor:  # inductor's compile workers, answering while the main process compiles
        assert pipes["fname"].startswith("(compiler pipes: ") and pipes["compile_events"] == pipes["events"]
    else:  # the child's output, read outside any compile
        # the child's pipe, read outside compile phases (torch 2.5.1 reads two more of its own while compiling)
        assert re.fullmatch(r"\(pipes and sockets: \d+\)", pipes["fname"]) and pipes["compile_events"] < pipes["events"]
    assert abs(s.by_file.get_column("share").drop_nulls().sum() - 1.0) < 1e-9
    view = file_view(s)
    assert view is not None
    counted = int(s.by_file.filter(pl.col("group") != "pipes").get_column("total_us").sum())
    assert view.program_us + view.other_us == counted and view.pipes_us == pipes["total_us"]
    inside = [r for r in rows if r["group"] in ("program", "other") and r["compile_events"] == r["events"]]
    assert view.compile_us == sum(r["total_us"] for r in inside)  # no pipe in "touched only while compiling"
    line = io_line(view)
    assert line in stdout, stdout[-3000:]  # the end of `dynascope run` says it
    assert line.startswith(f"I/O: {len(mine)} program files, ") and "\n  not counted as I/O: " in line
