"""Collectives joined across ranks, exposed communication in the step parts, stragglers: synthetic
compiled-DDP rank traces (benchmarks/bench_ranks.py: four buckets a step, issue markers and completions)."""

from __future__ import annotations

import polars as pl
import pytest
from comm_synth import bench_ranks, job

from dynascope.analyze import comm
from dynascope.analyze.pipeline import summarize_files
from dynascope.analyze.stepparts import PART_COLUMNS

STEPS, BUCKETS = 5, 4


@pytest.fixture(scope="module")
def straggled(tmp_path_factory):
    # rank 1 sleeps 0.5 s before step 2's backward (what ddp_train.py --straggle 2:1:0.5 does)
    return job(tmp_path_factory.mktemp("straggle"), world=3, steps=STEPS, straggle=(2, 1, 500_000))


def test_one_row_per_collective_with_every_rank(straggled):
    _, s = straggled
    c = s.collectives
    assert c.height == STEPS * BUCKETS
    assert c.get_column("seq").to_list() == list(range(STEPS * BUCKETS))
    assert set(c.get_column("op")) == {"all_reduce"} and set(c.get_column("source")) == {"ddp"}
    assert c.get_column("ranks").to_list() == [3] * c.height
    assert c.get_column("all_completed").all() and c.get_column("completed").to_list() == [3] * c.height
    row = c.filter(pl.col("seq") == 9).row(0, named=True)
    assert row["rank_list"] == [0, 1, 2]
    # each rank's issue and completion: the straggler issued last, by its sleep; every rank completes after it
    issues = dict(zip(row["rank_list"], row["issue_list"], strict=True))
    assert max(issues, key=issues.get) == 1 == row["last_rank"]
    assert 499_000 < row["late_us"] < 501_000 and row["late_us"] == row["last_issue_us"] - row["first_issue_us"]
    assert all(d > issues[1] for d in row["done_list"])
    assert row["step"] == 2


def test_stragglers_name_the_rank_the_step_and_what_it_did(straggled):
    _, s = straggled
    top = s.stragglers.row(0, named=True)
    assert (top["rank"], top["step"]) == (1, 2)
    assert 499_000 < top["late_us"] < 501_000
    assert top["doing"] == "Python / untraced" and 499_000 <= top["doing_us"] <= 501_000
    assert top["collectives"] == BUCKETS  # it was last in each bucket of that step
    # no other row comes near: the others were at most a few hundred µs late
    assert all(r < 1_000 for r in s.stragglers.get_column("late_us").to_list()[1:])


def test_exposed_communication_takes_its_time_from_the_other_parts(straggled):
    _, s = straggled
    steps = s.by_rank_step
    for r in steps.iter_rows(named=True):
        assert sum(r[c] for c in PART_COLUMNS) == r["total_us"]
        assert r["comm_hidden_us"] <= r["comm_total_us"] and r["comm_us"] <= r["comm_total_us"]
        assert r["overlap"] == pytest.approx(r["comm_hidden_us"] / r["comm_total_us"])
    two = {r["rank"]: r for r in steps.filter(pl.col("step") == 2).iter_rows(named=True)}
    # ranks 0 and 2 wait for rank 1 at the end of backward: exposed communication, not backward
    for rank in (0, 2):
        assert 500_000 < two[rank]["comm_us"] < 510_000, two[rank]
        assert two[rank]["backward_us"] < 40_000
        assert two[rank]["overlap"] < 0.1
    # rank 1 slept (other), and its buckets overlapped its backward graph as on a normal step
    assert two[1]["other_us"] > 500_000 and two[1]["comm_us"] < 5_000 and two[1]["overlap"] > 0.8
    # the job's step 2 is its slowest rank's; step stats get a comm row
    assert "comm" in s.step_stats.get_column("part").to_list()


def test_a_single_process_run_has_no_comm_part(tmp_path):
    mod = bench_ranks()
    plan = mod.job_timeline(1, 3)[0]
    p = tmp_path / "one-1.pfw.gz"
    mod.write_rank_trace(p, 0, 1, [dict(x, issues=x["issues"]) for x in plan])
    s = summarize_files([str(p)])
    assert "comm" in s.step_stats.get_column("part").to_list()  # its own collectives (world of one)
    # a trace without collectives: no comm row, no overlap columns
    from synth import write_two_process_trace

    t = summarize_files([str(x) for x in write_two_process_trace(tmp_path / "plain")])
    assert "comm" not in t.step_stats.get_column("part").to_list()
    assert "overlap" not in t.by_step.columns and t.collectives.height == 0 and t.hangs.height == 0


def test_serial_and_dask_agree(straggled):
    paths, s = straggled
    d = summarize_files([str(p) for p in paths], workers=2)
    for name in ("collectives", "stragglers", "clocks", "by_rank_step"):
        assert d.table(name).equals(s.table(name)), name


def test_functional_collectives_pair_each_op_with_its_wait():
    ops = pl.DataFrame({
        "pid": [7] * 6, "tid": [7] * 6, "rank": [0] * 6,
        "ts": [100, 110, 150, 300, 310, 360], "dur": [5, 5, 20, 5, 5, 30],
        "name": ["_c10d_functional.all_reduce_.default", "_c10d_functional.all_gather_into_tensor.default",
                 "_c10d_functional.wait_tensor.default", "_c10d_functional.all_reduce_.default",
                 "_c10d_functional.wait_tensor.default", "_c10d_functional.wait_tensor.default"],
        "comm_op": ["all_reduce", "all_gather_into_tensor", "wait_tensor", "all_reduce", "wait_tensor", "wait_tensor"],
        "comm_pg": ["0"] * 6, "comm_bytes": [4, 8, None, 4, None, None],
        "comm_key": ["ar", "ag", "ag", "ar", "ar", "ar"],
    })  # fmt: skip
    out = comm.functional_collectives(ops)
    assert out.select("name", "ts", "dur", "seq", "pg", "source").rows() == [
        ("all_reduce", 100, 215, 0, "0/functional", "functional"),  # the first 'ar' wait: 310 + 5
        ("all_gather_into_tensor", 110, 60, 1, "0/functional", "functional"),
        ("all_reduce", 300, 90, 2, "0/functional", "functional"),  # the second: 360 + 30
    ]


@pytest.mark.parametrize(("kind", "doing"), [
    ("compile", "recompile 0/1"),
    ("io", "checkpoint / file I/O"),
    ("data", "data wait (dataloader)"),
    ("gc", "garbage collection"),
])  # fmt: skip
def test_what_the_straggler_did_instead(tmp_path, kind, doing):
    # rank 2's 300 ms before step 3's backward is a recompile, a checkpoint, a data stall or a gc pass
    _, s = job(tmp_path, world=3, steps=4, straggle=(3, 2, 300_000), straggle_as=kind)
    top = s.stragglers.row(0, named=True)
    assert (top["rank"], top["step"], top["doing"]) == (2, 3, doing)
    assert 299_000 <= top["doing_us"] <= top["late_us"] < 301_000
