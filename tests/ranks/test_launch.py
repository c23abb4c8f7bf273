"""Many ranks, the launches (issue 26): each rank's files kept whatever the launch, one explanation per
rank, one job report written once. Real torchrun (gloo, CPU), compiled DDP under aot_eager."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import procs

from .launch import BIN, program, ranks_env, torchrun

TRAIN = program("ddp_train.py")
STEPS = ["--steps", "2", "--backend", "aot_eager"]


def _job_files(out: Path, nranks: int = 2) -> list[str]:
    traces = sorted(glob.glob(str(out / "ddp_train-rank*-*.pfw.gz")))
    ranks = sorted({re.search(r"-rank(\d+)-", t).group(1) for t in traces})  # type: ignore[union-attr]
    assert ranks == [str(r) for r in range(nranks)], traces
    for r in range(nranks):
        explained = out / f"rank{r}" / "explanation.json"
        assert explained.is_file(), sorted(os.listdir(out))
        assert list((out / f"rank{r}").glob("*.py")), "one .py per compiled function beside each explanation"
    assert not (out / "explanation.json").exists(), "a rank's explanation goes to its own folder"
    assert (out / "report.html").is_file()
    return traces


def _one_report(stdout: str, out: Path) -> None:
    assert stdout.count("next         dynascope report") == 1, stdout[-3000:]
    assert f"dynascope report {out}" in stdout
    assert stdout.count("op events") == 1  # one terminal summary


def _every_trace_complete(traces: list[str]) -> None:
    from dynascope.analyze import read_trace_with_info

    for t in traces:
        frame, info = read_trace_with_info(t)
        assert frame.height > 0
        assert not info.warnings, info.warnings  # each file ends with its end record, nothing torn


@pytest.fixture(scope="module")
def m_dynascope_job(tmp_path_factory):
    """One `torchrun ... -m dynascope run --out OUT train.py` job, shared: its own test reads it, and the
    --no-python test launches into the same OUT again (the relaunch that must replace these files)."""
    tmp = tmp_path_factory.mktemp("m_dynascope")
    out = tmp / "out"
    res = torchrun(["-m", "dynascope", "run", "--out", str(out), TRAIN, *STEPS], cwd=tmp)
    return tmp, out, res


def test_torchrun_m_dynascope(m_dynascope_job):
    """`torchrun ... -m dynascope run --out OUT train.py`: two ranks, neither deletes the other's file."""
    _, out, res = m_dynascope_job
    assert res.returncode == 0, res.stderr[-3000:]
    traces = _job_files(out)
    _one_report(res.stdout, out)
    _every_trace_complete(traces)
    # the rank that did not write the report says where its trace is, in one line
    assert re.search(r"dynascope run: rank [01]: trace .*ddp_train-rank[01]-\d+\.pfw\.gz", res.stderr)
    # the job report covers both ranks
    html = (out / "report.html").read_text()
    assert "2 ranks" in html


def test_torchrun_no_python_into_an_earlier_jobs_directory(m_dynascope_job):
    """`torchrun --no-python dynascope run --out OUT train.py` into the OUT of an earlier job (the -m
    launch above): the earlier job's files are replaced, none is mixed in."""
    tmp, out, first = m_dynascope_job
    assert first.returncode == 0, first.stderr[-3000:]
    before = set(_job_files(out))
    (out / "ddp_train-rank5-1.pfw.gz").write_bytes(b"")  # a stale rank beyond this job's world size
    (out / "ddp_train-77.pfw.gz").write_bytes(b"")  # a stale single-process trace
    second = torchrun(["--no-python", str(BIN / "dynascope"), "run", "--out", str(out), TRAIN, *STEPS], cwd=tmp)
    assert second.returncode == 0, second.stderr[-3000:]
    after = set(_job_files(out))
    assert not (before & after), "the first run's traces were removed by their own ranks"
    assert len(after) == 2
    assert not (out / "ddp_train-rank5-1.pfw.gz").exists() and not (out / "ddp_train-77.pfw.gz").exists()
    _one_report(second.stdout, out)


def test_dynascope_run_around_torchrun(tmp_path):
    """`dynascope run --out OUT torchrun --nproc-per-node=2 train.py`: the launcher's children run under
    `python -m dynascope run`; the outer process writes the job report once they are done."""
    out = tmp_path / "out"
    cmd = [str(BIN / "dynascope"), "run", "--out", str(out), "--backend", "aot_eager", str(BIN / "torchrun"),
           "--standalone", "--nproc-per-node", "2", TRAIN, "--steps", "2"]  # fmt: skip
    res = procs.run(cmd, cwd=tmp_path, env=ranks_env(), capture_output=True, text=True, timeout=300,
                         check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert "each under `python -m dynascope run --out" in res.stderr  # one line says what it does
    assert "the job report follows when the launcher is done" in res.stderr
    traces = _job_files(out)
    _one_report(res.stdout, out)
    _every_trace_complete(traces)


@pytest.mark.slow
def test_dynascope_run_around_python_m_torch_distributed_run(tmp_path):
    out = tmp_path / "out"
    cmd = [str(BIN / "dynascope"), "run", "--out", str(out), sys.executable, "-m", "torch.distributed.run",
           "--standalone", "--nproc_per_node=2", TRAIN, *STEPS]  # fmt: skip
    res = procs.run(cmd, cwd=tmp_path, env=ranks_env(), capture_output=True, text=True, timeout=300,
                         check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    _job_files(out)
    _one_report(res.stdout, out)


def test_launcher_that_only_sets_rank_variables(tmp_path):
    """srun or mpirun set RANK/LOCAL_RANK/WORLD_SIZE (and the rendezvous address) and start the command on
    each rank: two `python -m dynascope run` processes started so, one report from the last to finish."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "out"
    started = []
    for rank in range(2):
        env = ranks_env(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                        MASTER_PORT=str(port))  # fmt: skip
        started.append(procs.popen([sys.executable, "-m", "dynascope", "run", "--out", str(out), TRAIN, *STEPS],
                                      cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))  # fmt: skip
    results = [p.communicate(timeout=300) for p in started]
    assert [p.returncode for p in started] == [0, 0], [err[-2000:] for _, err in results]
    traces = _job_files(out)
    stdout = "".join(o for o, _ in results)
    _one_report(stdout, out)
    _every_trace_complete(traces)


def test_single_process_names_unchanged(tmp_path):
    """No rank variables: the files are named as before (x-<pid>.pfw.gz, OUT/explanation.json); the script
    given as `-m module args`, as `python -m module args` (its arguments its own)."""
    (tmp_path / "one.py").write_text(
        "import sys, torch\nf = torch.compile(lambda x: x.sin() + 1, backend='aot_eager')\nf(torch.ones(4))\n"
        "print('args', sys.argv[1:])\n"
    )
    out = tmp_path / "out"
    env = {k: v for k, v in ranks_env().items() if k not in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")}
    res = procs.run([sys.executable, "-m", "dynascope", "run", "--no-html", "--out", str(out), "-m", "one",
                          "--steps", "3"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
                         check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert "args ['--steps', '3']" in res.stdout
    names = sorted(os.listdir(out))
    traces = [n for n in names if n.endswith(".pfw.gz")]
    assert len(traces) == 1 and re.fullmatch(r"one-\d+\.pfw\.gz", traces[0]), names
    assert "explanation.json" in names and not any(n.startswith("rank") for n in names)
    assert not (out / ".ranks").exists()


ONE = "import torch\nf = torch.compile(lambda x: x.sin() + 1, backend='aot_eager')\nprint(f(torch.ones(4)).sum().item())\n"


def _dynascope(args: list[str], cwd, **env: str) -> subprocess.CompletedProcess:
    return procs.run([sys.executable, "-m", "dynascope", *args], cwd=cwd, env=ranks_env(**env),
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip


def test_report_written_by_the_last_rank_to_finish(tmp_path):
    """Ranks that finish one after the other (no process group: the markers alone decide): the first says
    where its trace is, the last writes the job's report over both."""
    (tmp_path / "one.py").write_text(ONE)
    out = tmp_path / "out"
    first = _dynascope(["run", "--out", str(out), "one.py"], tmp_path, RANK="1", WORLD_SIZE="2")
    assert first.returncode == 0, first.stderr[-2000:]
    assert "dynascope run: rank 1: trace " in first.stderr and "next " not in first.stdout
    assert not (out / "report.html").exists()
    last = _dynascope(["run", "--out", str(out), "one.py"], tmp_path, RANK="0", WORLD_SIZE="2")
    assert last.returncode == 0, last.stderr[-2000:]
    assert last.stdout.count("next         dynascope report") == 1
    assert "processes 2" in last.stdout
    assert (out / "report.html").is_file()
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == [".ranks", "rank0", "rank1"]


def test_explain_out_per_rank(tmp_path):
    (tmp_path / "one.py").write_text(ONE)
    res = _dynascope(["explain", "--quiet", "--out", "ex", "one.py"], tmp_path, RANK="1", WORLD_SIZE="2")
    assert res.returncode == 0, res.stderr[-2000:]
    assert (tmp_path / "ex" / "rank1" / "explanation.json").is_file()
    assert not (tmp_path / "ex" / "explanation.json").exists()
