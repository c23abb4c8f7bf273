"""Many ranks, signals (issue 26): a rank blocked in a collective dies of SIGTERM as it would without
dynascope, and its file ends with the `cut` record; a trace cut short is reported as such."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time

import orjson
import pytest
from support import procs
from support.cli import dynascope_here

from .hangs import check_planted_hang
from .launch import BIN, program, ranks_env

TRAIN = program("ddp_train.py")


def _records(path: str) -> list[dict]:
    import gzip

    with gzip.open(path, "rb") as fh:
        data = fh.read()
    out = []
    for line in data.splitlines():
        line = line.strip().rstrip(b",")
        if line.startswith(b"{"):
            out.append(orjson.loads(line))
    return out


def _stop_when_hung(cmd: list[str], cwd, marker: str = "step 1 ") -> tuple[float, int, str]:
    """Start the job, wait for rank 0's `marker` line (rank 1 then hangs in its data loading, rank 0 in the
    metric all-reduce), give it a moment to block, SIGTERM the launcher: (seconds to exit, status, output)."""
    proc = procs.popen(cmd, cwd=cwd, env=ranks_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)  # fmt: skip
    lines = []
    deadline = time.monotonic() + 300
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if line.startswith(marker) or time.monotonic() > deadline:
            break
    time.sleep(3)  # rank 0 is now blocked in the all-reduce of step 2
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=120)
    return time.monotonic() - sent, proc.returncode, "".join(lines) + rest


@pytest.fixture(scope="module")
def hung_job(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hang")
    out = tmp / "out"
    cmd = [str(BIN / "torchrun"), "--standalone", "--nproc_per_node=2", "-m", "dynascope", "run", "--no-html",
           "--out", str(out), TRAIN, "--steps", "4", "--hang", "2:1"]  # fmt: skip
    took, status, text = _stop_when_hung(cmd, tmp)
    return out, took, status, text


def test_blocked_rank_dies_of_sigterm_with_a_cut_record(hung_job):
    out, took, status, text = hung_job
    assert "forcefully exiting via 9" not in text.lower() and "sigkill" not in text.lower(), text[-3000:]
    assert took < 15, f"the job took {took:.1f} s to stop after SIGTERM (torchrun kills after 30 s)\n{text[-3000:]}"
    assert status != 0
    traces = sorted(glob.glob(str(out / "ddp_train-rank*-*.pfw.gz")))
    assert len(traces) == 2, traces
    by_rank = {}
    for t in traces:
        recs = _records(t)  # readable to the end
        cut = [r for r in recs if r.get("cat") == "dftracer" and r.get("name") == "cut"]
        end = [r for r in recs if r.get("cat") == "dftracer" and r.get("name") == "end"]
        assert len(cut) == 1 and len(end) == 1, t
        assert cut[0]["args"]["signal"] == "SIGTERM" and end[0]["args"]["cut"] == "SIGTERM"
        by_rank[int(t.split("-rank")[1].split("-")[0])] = cut[0]["args"]
    pending0 = by_rank[0]["pending"]
    assert any(p.get("op") == "all_reduce" for p in pending0), by_rank[0]
    assert isinstance(by_rank[1]["open"], list)


def test_the_hang_is_diagnosed_from_the_files(hung_job):
    """Rank 1 never gets its data at step 2 (--hang 2:1); rank 0 goes on into step 2's collectives and waits:
    the files alone say who waits in which collective, since which step, and that rank 1 never issued it."""
    import warnings

    from dynascope.analyze.pipeline import summarize_files

    out, *_ = hung_job
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the cut traces' warnings
        check_planted_hang(summarize_files(sorted(glob.glob(str(out / "ddp_train-rank*-*.pfw.gz")))))


def test_report_says_the_traces_were_cut(hung_job):
    out, *_ = hung_job
    res = dynascope_here("report", "--json", str(out))
    assert res.returncode == 0, res.stderr[-2000:]
    warnings = orjson.loads(res.stdout)["meta"]["warnings"]
    cut = [w for w in warnings if "cut by SIGTERM at" in w]
    assert len(cut) == 2, warnings
    assert any("all_reduce" in w for w in cut), cut


@pytest.mark.slow
def test_plain_job_stops_as_fast(tmp_path, hung_job):
    """The same hang without dynascope stops in about the same time (the comparison the tests above bound)."""
    cmd = [str(BIN / "torchrun"), "--standalone", "--nproc_per_node=2", TRAIN, "--steps", "4", "--hang", "2:1"]
    took, status, _ = _stop_when_hung(cmd, tmp_path)
    assert status == hung_job[2], (status, hung_job[2])
    assert abs(took - hung_job[1]) < 3, (took, hung_job[1])


SCRIPT = """
import time, dynascope
dynascope.session({path!r})
with dynascope.region("waiting"):
    print("ready", flush=True)
    time.sleep(60)
"""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_single_process_cut_reported(tmp_path, sig):
    script = tmp_path / "wait.py"
    script.write_text(SCRIPT.format(path=str(tmp_path / "t.pfw.gz")))
    proc = procs.popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(1.5)  # past one flush: the region's begin is in the file
    proc.send_signal(sig)
    proc.wait(timeout=30)
    assert proc.returncode == -sig  # killed by the signal, as without dynascope
    (trace,) = glob.glob(str(tmp_path / "t-*.pfw.gz"))
    from dynascope.render._analysis import summarize_paths

    warnings = summarize_paths([trace]).meta["warnings"]
    name = os.path.basename(trace)
    if sig == signal.SIGKILL:
        assert any(name in w and "ends without its end record: the process was killed (SIGKILL) or crashed" in w
                   for w in warnings), warnings  # fmt: skip
    else:
        assert any(f"{name}: cut by SIGTERM at" in w for w in warnings), warnings
        recs = _records(trace)
        (cut,) = [r for r in recs if r.get("name") == "cut"]
        assert [o["regions"] for o in cut["args"]["open"]] == [["waiting"]]
