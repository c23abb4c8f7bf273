"""The job's report over a real 2-rank run (torchrun, gloo, CPU, compiled DDP under aot_eager): steps are the
job's (the slowest rank's, never the ranks' sum), one row per rank, every rank's explanation read, and a
planted divergence (rank 1's batch shrinks at step 3, so it alone recompiles) named first, with its rank,
step and guard (docs/ranks.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import dynascope_here
from support.invariants import check, collect, report

from .launch import BIN, program, torchrun

STEPS = 5


def _run_job(tmp_path: Path, *args: str, nproc: int = 2, per_rank_dirs: bool = False) -> Path:
    """`torchrun -m dynascope run --out OUT ddp_train.py ARGS` (one directory for the job: a trace and
    rank<R>/explanation.json per rank, one report.html); with `per_rank_dirs`, one `dynascope run` per rank
    each with its own OUT/r<RANK> (a launch script that gives each rank its directory)."""
    out = tmp_path / "out"
    if per_rank_dirs:
        script = f'exec "{BIN}/dynascope" run --out "{out}/r$RANK" "{program("ddp_train.py")}" {" ".join(args)}'
        result = torchrun(["--no-python", "sh", "-c", script], nproc=nproc, cwd=tmp_path, timeout=900)
    else:
        result = torchrun(["-m", "dynascope", "run", "--out", str(out), program("ddp_train.py"), *args], nproc=nproc,
                          cwd=tmp_path, timeout=900)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (out / "stdout.txt").write_text(result.stdout)
    return out


def _report(*args: str) -> str:
    done = dynascope_here("report", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def diverged(tmp_path_factory) -> Path:
    return _run_job(tmp_path_factory.mktemp("diverge"), "--steps", str(STEPS), "--diverge", "3:1")


@pytest.fixture(scope="module")
def diverged_per_rank(tmp_path_factory) -> Path:
    return _run_job(tmp_path_factory.mktemp("diverge-dirs"), "--steps", str(STEPS), "--diverge", "3:1",
                    per_rank_dirs=True)  # fmt: skip


def test_the_divergence_names_rank_1_step_3_and_the_size_guard(diverged):
    summary = json.loads(_report("--json", str(diverged)))
    first = summary["divergence"][0]
    assert first["kind"] == "recompile" and first["ranks"] == "1" and first["step"] == 3, first
    assert "rank 1 recompiled" in first["detail"] and "at step 3" in first["detail"]
    assert "size mismatch at index 0" in first["detail"] and "expected 32, actual 16" in first["detail"]
    # the recompiled forward: the line of its guarded input's first op (2.13), else its def line (2.5.1 and
    # 2.15, where torch's guard names no line of the program's)
    assert first["source"] in ("ddp_train.py:37", "ddp_train.py:36")
    assert first["hang_risk"] is True
    assert sorted(summary["explanations"]) == ["0", "1"]  # both ranks' explanations read
    recompile = summary["recompiles"][0]
    assert recompile["ranks"] == "1" and "size mismatch" in recompile["reason"]
    ranks = {r["rank"]: r for r in summary["by_rank"]}
    assert ranks[0]["recompiles"] == 0 and ranks[1]["recompiles"] == 1
    assert ranks[0]["status"] == ranks[1]["status"] == "complete"
    # the slow step 3 is charged to rank 1's recompile, not to rank 0's wait in backward
    slow = next(s for s in summary["slow_steps"] if s["step"] == 3)
    assert slow["rank"] == 1 and slow["part"] == "compile", slow
    assert slow["why"].startswith("rank 1: compile +") and "recompile" in slow["why"]


def test_the_steps_are_the_jobs_not_the_ranks_sum(diverged):
    summary = json.loads(_report("--json", str(diverged)))
    span = summary["meta"]["span_us"]
    steps = summary["by_step"]
    assert [s["step"] for s in steps] == list(range(STEPS))
    per_rank = summary["by_rank_step"]
    assert len(per_rank) == 2 * STEPS
    for s in steps:
        walls = [r["total_us"] for r in per_rank if r["step"] == s["step"]]
        assert s["ranks"] == 2 and s["total_us"] == max(walls) < sum(walls)
        assert s["total_us"] <= span
    for rank in (0, 1):
        assert sum(r["total_us"] for r in per_rank if r["rank"] == rank) <= span


def test_the_terminal_and_html_show_the_ranks(diverged, tmp_path):
    text = _report(str(diverged))
    assert text.index("Ranks diverge (hang risk): rank 1 recompiled forward at step 3") < text.index("Steps of the job")
    assert "Ranks: 2" in text
    html = tmp_path / "job.html"
    _report("-q", "--html", str(html), str(diverged))
    page = html.read_text()
    assert 'id="rank-steps"' in page and 'id="divergence"' in page
    assert page.count('class="slowest"') == STEPS  # one slowest rank marked per step
    assert "rank 1, step 3:" in page and "compile" in page


@pytest.mark.slow
def test_one_directory_per_rank_is_one_job_too(diverged_per_rank):
    summary = json.loads(_report("--json", str(diverged_per_rank)))
    assert sorted(summary["explanations"]) == ["0", "1"]
    first = summary["divergence"][0]
    assert (first["kind"], first["ranks"], first["step"]) == ("recompile", "1", 3)
    assert [s["ranks"] for s in summary["by_step"]] == [2] * STEPS


def test_the_runs_own_job_report(diverged):
    """The report `dynascope run` wrote for the job: its terminal summary and report.html name the
    divergence."""
    stdout = (diverged / "stdout.txt").read_text()
    assert "Ranks diverge (hang risk): rank 1 recompiled forward at step 3" in stdout
    page = (diverged / "report.html").read_text()
    assert 'id="divergence"' in page and 'id="rank-steps"' in page


def test_every_invariant_holds_on_the_job(diverged):
    failures = check(collect(diverged, (diverged / "stdout.txt").read_text()))
    assert not failures, f"{len(failures)} invariants broken:" + report(failures)
    # the recompiled forward's split (0/1, rank 1) joins the first split's row at the same line
    summary = json.loads(_report("--json", str(diverged)))
    (split,) = [r for r in summary["graph_breaks"] if r["kind"] == "ddp split"]
    assert sorted(split["compile_ids"]) == ["0/0", "0/1"]


@pytest.mark.slow
def test_three_ranks_under_inductor_name_the_rank_that_diverged(tmp_path):
    out = _run_job(tmp_path, "--backend", "inductor", "--steps", "4", "--diverge", "2:2", nproc=3)
    summary = json.loads(_report("--json", str(out)))
    assert [r["rank"] for r in summary["by_rank"]] == [0, 1, 2]
    assert sorted(summary["explanations"]) == ["0", "1", "2"]
    first = summary["divergence"][0]
    assert first["kind"] == "recompile" and first["ranks"] == "2" and first["step"] == 2, first
    assert "ranks 0, 1 did not" in first["detail"] and "size mismatch" in first["detail"]
    span = summary["meta"]["span_us"]
    assert all(s["ranks"] == 3 and s["total_us"] <= span for s in summary["by_step"])
    failures = check(collect(out))
    rest = [f for f in failures if not (f.startswith("[duplicate]") and ("graph_breaks" in f or "Graph breaks" in f))]
    assert not rest, report(rest)


def test_explain_reads_a_jobs_directory_rank_by_rank(diverged):
    """`dynascope explain OUT` on a job: each rank's explanation in rank order, rank 1's with its recompile;
    `dynascope explain OUT/rank1` alone is costed from rank 1's traces in OUT."""
    def explain(target: Path) -> str:
        done = dynascope_here("explain", str(target))
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout + done.stderr

    both = explain(diverged)
    assert both.index("= rank0 =") < both.index("= rank1 =")
    assert "size mismatch at index 0" in both.split("= rank1 =")[1]
    assert "size mismatch at index 0" not in both.split("= rank1 =")[0]
    one = explain(diverged / "rank1")
    assert "size mismatch at index 0" in one and "no trace beside" not in one


def test_a_jobs_per_step_costs_are_per_rank_step(diverged):
    """The graph-break table adds every rank's calls; its per step is per rank's step (not doubled by
    dividing two ranks' costs by the job's steps)."""
    summary = json.loads(_report("--json", str(diverged)))
    rank_steps = sum(1 for r in summary["by_rank_step"] if r["step"] is not None)
    assert rank_steps == 2 * STEPS
    rows = [r for r in summary["graph_breaks"] if r.get("per_step_us") is not None and r["total_us"]]
    assert rows
    for r in rows:
        assert r["per_step_us"] == pytest.approx(r["total_us"] / rank_steps, rel=1e-6), r
