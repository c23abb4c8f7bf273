"""Many ranks on synthetic traces (tests/support/step_trace.py, docs/trace-format.md): steps per rank, the job's step
as its slowest rank's (never the sum), the per-rank table, how each trace ended, and the slow step's why
naming the rank that stood out and what the others waited in (analyze/ranks.py, stepstats.py)."""

from __future__ import annotations

import json
import warnings

import polars as pl
from support import step_trace as st

from dynascope.analyze.pipeline import summarize_files
from dynascope.render.terminal import summary_text

STEPS = 6
SLOW = 3  # the step rank 1 recompiles in, while rank 0 waits in its backward


def ranked(tr: st.Trace, rank: int, world: int = 2) -> st.Trace:
    """`tr` with a start record that names its rank (as a launcher's RANK/WORLD_SIZE do)."""
    for i, line in enumerate(tr.lines):
        if '"name":"start"' in line:
            tr.lines[i] = line.replace('"rank":-1,"world_size":1', f'"rank":{rank},"world_size":{world}')
    return tr


def rank_trace(rank: int, *, pid: int, end: bool = True) -> tuple[st.Trace, list[dict[str, int]]]:
    """One rank's loop: both compile in step 0; at step SLOW rank 1 recompiles (800 µs) and rank 0 waits
    800 µs longer in its backward (the all-reduce waits for rank 1)."""
    tr = ranked(st.Trace(pid), rank)
    loop = st.Loop(tr)
    for k in range(STEPS):
        recompile = rank == 1 and k == SLOW
        loop.iteration(
            lead=0 if k == 0 else 5,
            compile_us=900 if k == 0 else (800 if recompile else 0),
            compile_id="0/1" if recompile else "0/0",
            backward=840 if rank == 0 and k == SLOW else 40,
        )
    if end:
        tr.end(loop.t + 10)
    return tr, loop.iterations


def write_job(tmp_path, end1: bool = True, cut1: str | None = None):
    expected = {}
    paths = []
    for rank, pid in ((0, 500), (1, 501)):
        tr, parts = rank_trace(rank, pid=pid, end=rank == 0 or end1)
        if rank == 1 and cut1:
            tr.event("cut", "dftracer", st.T0 + 10_000, 0, {"signal": cut1, "pending": [], "open": []})
            tr.end(st.T0 + 10_001)
        expected[rank] = parts
        paths.append(tr.write(tmp_path / f"train-rank{rank}-{pid}.pfw"))
    return paths, expected


def summarize(paths):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return summarize_files([str(p) for p in paths])


def parts_of(row: dict) -> dict[str, int]:
    return {p: row[f"{p}_us"] for p in st.PARTS}


def test_steps_per_rank_and_the_job_step_is_the_slowest_ranks(tmp_path):
    paths, expected = write_job(tmp_path)
    s = summarize(paths)
    per_rank = s.by_rank_step
    assert per_rank.height == 2 * STEPS
    for rank in (0, 1):
        rows = per_rank.filter(pl.col("rank") == rank).sort("step").to_dicts()
        assert [parts_of(r) for r in rows] == expected[rank]
        assert all(r["total_us"] == sum(parts_of(r).values()) for r in rows)
    job = s.by_step.sort("step").to_dicts()
    assert len(job) == STEPS
    for r in job:
        same = per_rank.filter(pl.col("step") == r["step"])
        walls = same.get_column("total_us").to_list()
        assert r["total_us"] == max(walls) < sum(walls)  # the slowest rank's, not the ranks' sum
        assert r["ranks"] == 2
        slowest = same.filter(pl.col("total_us") == r["total_us"]).get_column("rank").min()
        assert r["rank"] == slowest
        assert parts_of(r) == parts_of(same.filter(pl.col("rank") == r["rank"]).row(0, named=True))
    # the job's steps lie within the job's span
    assert sum(r["total_us"] for r in job) <= s.meta["span_us"]


def test_the_slow_step_names_the_rank_that_recompiled_and_says_the_other_waited(tmp_path):
    paths, _ = write_job(tmp_path)
    s = summarize(paths)
    slow = s.slow_steps.filter(pl.col("step") == SLOW).row(0, named=True)
    assert slow["rank"] == 1 and slow["part"] == "compile"
    assert slow["why"].startswith("rank 1: compile +800 µs (recompile: 1 compile started: 0/1)")
    assert "rank 0 backward +800 µs" in slow["why"] and "waited" in slow["why"]
    assert "backward +" not in slow["why"].split(";")[0]  # the wait is not given as the cause


def test_by_rank_and_trace_status(tmp_path):
    paths, _ = write_job(tmp_path, cut1="SIGTERM")
    s = summarize(paths)
    rows = {r["rank"]: r for r in s.by_rank.iter_rows(named=True)}
    assert set(rows) == {0, 1}
    assert rows[0]["status"] == "complete" and rows[1]["status"] == "cut by SIGTERM"
    assert rows[0]["pid"] == 500 and rows[1]["pid"] == 501
    assert rows[0]["steps"] == rows[1]["steps"] == STEPS
    assert rows[0]["recompiles"] == 0 and rows[1]["recompiles"] == 1  # from the trace's compile ids
    assert rows[0]["graphs"] == 1 and rows[1]["graphs"] == 2
    assert rows[0]["graph_breaks"] is None  # no explanation read
    # per-rank compile time adds up to by_process's
    assert sum(r["compile_us"] for r in rows.values()) == s.by_process.get_column("compile_us").sum()
    text = summary_text(s, width=140)
    assert "rank 1: trace cut by SIGTERM" in text


def test_a_trace_without_an_end_record(tmp_path):
    paths, _ = write_job(tmp_path, end1=False)
    s = summarize(paths)
    assert dict(s.by_rank.select("rank", "status").iter_rows()) == {0: "complete", 1: "no end record"}


def test_a_dataloader_worker_belongs_to_its_rank(tmp_path):
    paths, _ = write_job(tmp_path)
    worker = ranked(st.worker_trace(600, 501, 0, [0, 1, 2], st.T0 + 100), 1)
    worker.end(st.T0 + 2000)
    paths.append(worker.write(tmp_path / "train-rank1-600.pfw"))
    s = summarize(paths)
    rows = {r["rank"]: r for r in s.by_rank.iter_rows(named=True)}
    assert rows[1]["processes"] == 2 and rows[1]["pid"] == 501
    assert rows[0]["processes"] == 1
    assert s.by_step.height == STEPS  # a worker has no steps of its own


def test_a_single_process_keeps_its_steps(tmp_path):
    tr, expected = st.training_trace(pid=4242)
    p = tr.write(tmp_path / "train-4242.pfw")
    s = summarize([p])
    assert "rank" not in s.by_step.columns and "ranks" not in s.by_step.columns
    assert s.by_rank_step.height == 0 and s.by_rank.height == 0 and s.divergence.height == 0
    assert [parts_of(r) for r in s.by_step.sort("step").to_dicts()] == expected
    assert "rank" not in s.slow_steps.columns


def test_every_ranks_explanation_is_read_from_the_jobs_layout(tmp_path):
    write_job(tmp_path)
    for rank in (0, 1):
        (tmp_path / f"rank{rank}").mkdir()
        recompiles = [] if rank == 0 else [{
            "function": "forward", "file": "/x/train.py", "line": 12, "compile_id": "0/1",
            "reason": "tensor 'x' size mismatch at index 0. expected 32, actual 16",
            "failures": [{"compile_id": "0/0", "reason": "tensor 'x' size mismatch at index 0. expected 32, actual 16",
                          "subject": "x", "expected": "32", "actual": "16"}],
        }]  # fmt: skip
        (tmp_path / f"rank{rank}" / "explanation.json").write_text(json.dumps({
            "schema": "dynascope.explanation/1", "explanations": [], "graph_breaks": [], "recompiles": recompiles,
            "compile_times": [{"compile_id": c, "function": "forward", "graph_op_count": 2}
                              for c in (["0/0"] if rank == 0 else ["0/0", "0/1"])],
        }))  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = summarize_files([str(tmp_path)], explanation="auto")
    assert sorted(s.explanations) == [0, 1]
    assert s.by_rank.get_column("explanation").to_list() == [True, True]
    assert s.recompiles.height == 1 and s.recompiles.row(0, named=True)["ranks"] == "1"
    first = s.divergence.row(0, named=True)
    assert first["kind"] == "recompile" and first["ranks"] == "1" and first["step"] == SLOW
    assert "rank 1 recompiled forward at step 3: tensor 'x' size mismatch at index 0" in first["detail"]
    assert first["source"] == "train.py:12" and first["hang_risk"] is True
    assert not s.meta["warnings"]


def test_a_rank_without_its_explanation_is_said(tmp_path):
    write_job(tmp_path)
    (tmp_path / "rank0").mkdir()
    (tmp_path / "rank0" / "explanation.json").write_text(json.dumps({"schema": "dynascope.explanation/1",
                                                                      "recompiles": [], "graph_breaks": []}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = summarize_files([str(tmp_path)], explanation="auto")
    assert sorted(s.explanations) == [0]
    assert any("no explanation for rank 1" in w for w in s.meta["warnings"])


def test_the_rank_invariants_hold_here_and_catch_the_ranks_steps_added_together(tmp_path):

    from support.invariants import check_ranks

    from dynascope.render._analysis import summary_to_dict

    paths, _ = write_job(tmp_path)
    d = summary_to_dict(summarize(paths))
    assert check_ranks(d, "json", None) == []
    summed = {**d, "by_step": [dict(r, total_us=sum(x["total_us"] for x in d["by_rank_step"] if x["step"] == r["step"]))
                               for r in d["by_step"]]}  # fmt: skip
    assert any(f.startswith("[job step]") for f in check_ranks(summed, "json", None))
    bad = {**d, "by_rank": [dict(r, compile_us=r["compile_us"] + 5) for r in d["by_rank"]]}
    assert any(f.startswith("[by_rank]") for f in check_ranks(bad, "json", None))
    old = {k: v for k, v in d.items() if k not in ("by_rank", "by_rank_step")}  # a report from before ranks
    old["by_step"] = [dict(r, total_us=d["meta"]["span_us"] + 1) for r in d["by_step"]]
    found = check_ranks(old, "json", None)
    assert any(f.startswith("[by_rank]") for f in found) and any(f.startswith("[job step<=span]") for f in found)


def test_one_explanation_given_still_takes_the_tables_and_the_ranks_are_still_read(tmp_path):
    write_job(tmp_path)
    for rank in (0, 1):
        (tmp_path / f"rank{rank}").mkdir()
        (tmp_path / f"rank{rank}" / "explanation.json").write_text(json.dumps({
            "schema": "dynascope.explanation/1", "graph_breaks": [], "compile_times": [],
            "recompiles": [{"function": "forward", "file": f"/x/r{rank}.py", "line": 3, "compile_id": "0/1",
                            "reason": f"guard of rank {rank}", "failures": []}] if rank else [],
        }))  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one = summarize_files([str(tmp_path)], explanation=str(tmp_path / "rank0" / "explanation.json"))
        every = summarize_files([str(tmp_path)], explanation="auto")
    assert sorted(one.explanations) == [0, 1]  # the per-rank and divergence tables read both
    assert "guard of rank 1" not in " ".join(one.recompiles.get_column("reason").drop_nulls().to_list())
    assert every.recompiles.row(0, named=True)["reason"] == "guard of rank 1"
    assert one.divergence.row(0, named=True)["kind"] == "recompile"
