"""The Dask path gives exactly the single-machine summary (a real local cluster, threads)."""

from __future__ import annotations

import pytest
import synth

pytest.importorskip("distributed")

from test_summarize import assert_same

from dynascope.analyze.pipeline import summarize, summarize_files
from dynascope.analyze.read.reader import read_trace


def test_dask_local_cluster_equals_single_machine(tmp_path):
    files = synth.write_two_process_trace(tmp_path / "t")
    # a third rank with a step region and many durations, so percentiles are not trivial
    ev = [synth.x(1, "start", "dftracer", 300, 0, 0, {"hhash": synth.HA, "rank": 2, "world_size": 3})]
    ev += [synth.op(i + 2, "function.relu.default", 300, 10_000 + 10 * i, (7 * i) % 23, synth.OP_RELU, synth.HA) for i in range(200)]
    ev.append(synth.x(500, "step", "train", 300, 10_000, 1000, {"hhash": synth.HA, "epoch": 1, "step": 5}))
    ev.append(synth.x(501, "end", "dftracer", 300, 12_000, 0, {"hhash": synth.HA}))  # a complete file
    files.append(synth.write_pfw(tmp_path / "t" / "trace-300.pfw", ev))
    local = summarize(read_trace(files), top=5)
    on_dask = summarize_files(files, top=5, workers=2)
    assert_same(on_dask, local)
    assert on_dask.by_process.height == 3
    assert on_dask.by_step.filter(on_dask.by_step["step"] == 5).select("op_count").item() == 101  # ts 10000..11000, both ends in


def test_dask_scheduler_address(tmp_path):
    from distributed import LocalCluster

    files = synth.write_two_process_trace(tmp_path / "t")
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster:
        on_dask = summarize_files(files, top=3, scheduler=cluster.scheduler_address)
    assert_same(on_dask, summarize(read_trace(files), top=3))


def test_dask_bad_workers_is_a_clear_error(tmp_path):
    from dynascope.errors import ConfigError

    files = synth.write_two_process_trace(tmp_path / "t")
    with pytest.raises(ConfigError, match="workers must be at least 1"):
        summarize_files(files, workers=0)
