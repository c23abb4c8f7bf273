"""by_file on a real run: tests/capture/scripts/whole_step.py (samples torch.save'd by the main process, read
with open + torch.load by two DataLoader workers each epoch, a checkpoint torch.save'd per epoch) under
`dynascope run`, in a subprocess; this process reads the traces without torch."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from polars.testing import assert_frame_equal

import dynascope
import dynascope.analyze.partial as P
from dynascope.analyze.summarize import finish, merge, summarize_files

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="the run needs torch")

TESTS = Path(__file__).resolve().parents[1]
SCRIPT = TESTS / "capture" / "scripts" / "whole_step.py"
SRC = Path(dynascope.__file__).resolve().parents[1]  # absolute: the child runs this checkout


def test_files_of_a_real_training_run(tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    samples, epochs = 8, 2
    command = [sys.executable, "-m", "dynascope.cli", "run", "--out", str(out), "--no-html", "--no-explain",
               str(SCRIPT), "--data", str(data), "--workers", "2", "--samples", str(samples), "--epochs", str(epochs)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "I/O: " in done.stdout  # the end-of-run line
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
    general = finish(merge([P.general_file_partial(p) for p in traces]))
    assert_frame_equal(s.by_file, general.by_file, check_exact=True)
