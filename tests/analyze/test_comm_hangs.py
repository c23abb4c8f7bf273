"""Hangs diagnosed from the files alone: a job stopped while a rank waits in a collective another rank never
issued (synthetic traces: the waiting ranks' issue markers without completion, the `cut` record's pending
and open regions, or no `end` record at all)."""

from __future__ import annotations

import polars as pl
from comm_synth import job

from dynascope.analyze.comm_job import hang_lines


def test_sigterm_cut_names_the_waiting_rank_and_where_the_other_was(tmp_path):
    # rank 1 never gets its data at step 2 (ddp_train.py --hang 2:1); rank 0 waits in step 2's first bucket
    _, s = job(tmp_path, world=2, steps=5, hang=(2, 1))
    h = s.hangs
    waiting = h.filter(pl.col("state") == "waiting").row(0, named=True)
    assert (waiting["rank"], waiting["op"], waiting["pg"], waiting["seq"], waiting["step"]) == (0, "all_reduce", "0", 8, 2)
    assert waiting["waits_for"] == "1" and waiting["file_end"] == "cut by SIGTERM"
    never = h.filter(pl.col("state") == "never issued").row(0, named=True)
    assert never["rank"] == 1 and "dataloader.next" in never["where"] and "step 2" in never["where"]
    assert hang_lines(h) == [
        ("rank 0 waits in all_reduce (pg 0, seq 8) since step 2; rank 1 never issued it: it was in "
        "dataloader.next in step 2")
    ]
    # the collective is in the joined table, issued by one rank of two and completed by none
    c = s.collectives.filter(pl.col("seq") == 8).row(0, named=True)
    assert (c["ranks"], c["completed"], c["all_completed"]) == (1, 0, False)


def test_a_ranks_dataloader_worker_does_not_stand_for_it(tmp_path):
    # rank 1's DataLoader worker: a file of its own with rank 1 and a normal end; rank 1 is its main process
    from comm_synth import bench_ranks

    paths, _ = bench_ranks().write_job(tmp_path, 2, 5, hang=(2, 1))
    worker = tmp_path / "train-rank1-20001.pfw.gz"
    bench_ranks().write_rank_trace(worker, 1, 2, [], pid=20_001, cut="end")
    from dynascope.analyze.pipeline import summarize_files

    s = summarize_files([str(p) for p in [*paths, worker]])
    never = s.hangs.filter(pl.col("state") == "never issued").row(0, named=True)
    assert never["rank"] == 1 and never["file_end"] == "cut by SIGTERM" and "dataloader.next" in never["where"]


def test_no_end_record_is_enough(tmp_path):
    # SIGKILL: no cut record and no end record; the issue markers alone say what rank 0 waited in
    _, s = job(tmp_path, world=3, steps=4, hang=(1, 2), cut={0: "kill", 1: "kill", 2: "kill"})
    lines = hang_lines(s.hangs)
    assert len(lines) == 1
    assert lines[0].startswith("ranks 0, 1 wait in all_reduce (pg 0, seq 4) since step 1; rank 2 never issued it")
    assert "it was past its last events (optimizer.step" in lines[0]
    assert set(s.hangs.get_column("file_end")) == {"no end record (killed or crashed)"}


def test_a_run_that_ended_normally_has_no_hang(tmp_path):
    _, s = job(tmp_path, world=2, steps=3)
    assert s.hangs.height == 0 and hang_lines(s.hangs) == []


def test_a_trace_that_began_late_is_no_hang(tmp_path):
    # rank 1's trace lacks the job's first four collectives (tracing began after them): a gap, not a stop
    import gzip

    paths, _ = job(tmp_path / "a", world=2, steps=3)
    text = gzip.decompress(paths[1].read_bytes()).decode().splitlines(keepends=True)
    early = [f'"seq":{k},' for k in range(4)]
    kept = [ln for ln in text if not ('"cat":"comm"' in ln and any(e in ln for e in early))]
    assert len(kept) == len(text) - 8  # four markers and four completions
    paths[1].write_bytes(gzip.compress("".join(kept).encode()))
    from dynascope.analyze.pipeline import summarize_files

    s = summarize_files([str(p) for p in paths])
    assert s.collectives.filter(pl.col("seq") < 4).get_column("ranks").to_list() == [1] * 4
    assert s.hangs.height == 0
