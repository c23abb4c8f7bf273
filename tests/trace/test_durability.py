"""Nothing lost: every way a traced program can end leaves a complete, readable trace."""

import os
import signal
import subprocess
import sys
import time

import pytest
from support import procs
from support.tracecheck import attrs, check, load, op_events, readable_prefix, trace_files

SCRIPTS = os.path.join(os.path.dirname(__file__), "scripts")
WORKLOAD = os.path.join(SCRIPTS, "workload.py")


def start(mode, tmp_path, **env):
    # inductor compiles in the process: torch 2.5's pool of compile workers, shut down at exit under load, can
    # print a BrokenPipeError traceback of its own into the stderr these tests read
    return procs.popen(
        [sys.executable, WORKLOAD, mode, str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "DYNASCOPE_FLUSH_INTERVAL_MS": "100", "TORCHINDUCTOR_COMPILE_THREADS": "1", **env},
    )  # fmt: skip


def finish(mode, tmp_path, **env):
    proc = start(mode, tmp_path, **env)
    out, err = proc.communicate(timeout=300)
    return proc.returncode, out, err


def only_trace(tmp_path):
    files = trace_files(str(tmp_path))
    assert len(files) == 1, files
    return files[0]


def steps_in(index):
    """Step numbers of the step regions, in the order they started."""
    return [e["args"]["step"] for e in sorted(index["events"], key=lambda e: e["ts"]) if e["name"] == "step"]


@pytest.mark.parametrize("mode", ["finalize-twice", "exit"])
def test_normal_endings_write_a_complete_file(tmp_path, mode):
    code, _, err = finish(mode, tmp_path)
    assert code == 0, err
    index = check(load(only_trace(tmp_path)))
    assert steps_in(index) == [0, 1, 2]
    assert {attrs(index, e)["phase"] for e in op_events(index)} == {"forward", "backward"}
    if mode == "finalize-twice":  # the second finalize() says so in one line, and changes nothing
        assert err.count("finalize() called again") == 1 and "Traceback" not in err


def test_uncaught_exception_keeps_the_trace_and_the_users_traceback(tmp_path):
    code, _, err = finish("raise", tmp_path)
    assert code == 1 and "RuntimeError: the user's bug" in err
    index = check(load(only_trace(tmp_path)))
    assert steps_in(index) == [0, 1, 2, 99]  # the region open at the crash is closed at exit
    end = index["events"][-1]["args"]  # the end record says what ended the program (not out of memory)
    assert end["exit_error"] == "RuntimeError: the user's bug" and "oom" not in end


@pytest.mark.parametrize(("signum", "mode"), [
    pytest.param(signal.SIGTERM, "wait", marks=pytest.mark.slow),  # SIGTERM: wait-in-step below; waiting: SIGINT
    (signal.SIGINT, "wait"),
    (signal.SIGTERM, "wait-in-step"),
])  # fmt: skip
def test_signals_leave_a_complete_file(tmp_path, signum, mode):
    proc = start(mode, tmp_path)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    proc.send_signal(signum)
    proc.communicate(timeout=60)
    assert proc.returncode != 0
    index = check(load(only_trace(tmp_path)))
    assert len(op_events(index)) > 0


def test_sigkill_loses_at_most_the_unflushed_tail(tmp_path):
    proc = start("wait", tmp_path)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(1.0)  # several flush intervals
    proc.kill()
    proc.communicate(timeout=60)
    lines, _cut = readable_prefix(only_trace(tmp_path))
    import json

    records = [json.loads(line) for line in lines[1:] if line]
    index = check(records, complete=False)
    assert index["events"][-1]["name"] != "end"
    assert steps_in(index)[:3] == [0, 1, 2]


def test_threads_get_their_own_tid(tmp_path):
    code, _, err = finish("threads", tmp_path)
    assert code == 0, err
    records = load(only_trace(tmp_path))
    index = check(records)
    tids = {e["tid"] for e in op_events(index)}
    assert len(tids) == 3  # main thread (first steps) and two workers
    named = {r["tid"]: r["args"]["name"] for r in records if r["name"] == "thread_name"}
    assert tids <= set(named) and {"worker-0", "worker-1"} <= set(named.values())
    assert len(steps_in(index)) == 3 + 8


def test_drains_cutting_graph_calls_lose_nothing(tmp_path):
    code, _, err = finish("many-calls", tmp_path, DYNASCOPE_FLUSH_INTERVAL_MS="1")
    assert code == 0, err
    index = check(load(only_trace(tmp_path)))
    end = index["events"][-1]
    assert end["args"]["dropped"] == 0
    calls = [e for e in op_events(index, "dynamo.graph") if attrs(index, e)["phase"] == "inference"]
    assert len(calls) == 3000
    per_call = attrs(index, calls[0])["n_ops"]
    inference_ops = [e for e in op_events(index) if attrs(index, e)["phase"] == "inference"]
    assert len(inference_ops) == 3000 * per_call


def test_forked_dataloader_workers_write_their_own_files(tmp_path):
    result = procs.run([sys.executable, os.path.join(SCRIPTS, "dataloader_fork.py"), str(tmp_path)],
                            capture_output=True, check=False, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    files = trace_files(str(tmp_path))
    assert len(files) == 3, files
    pids = set()
    loads = 0
    for path in files:
        index = check(load(path))
        pid = index["events"][0]["pid"]
        assert path.endswith(f"-{pid}.pfw.gz")
        pids.add(pid)
        loads += sum(1 for e in index["events"] if e["name"] == "load_item")
    assert len(pids) == 3 and loads == 8  # every item was loaded in a worker, and recorded there


def test_a_fork_waits_for_the_trace_threads_background_imports():
    """The writer and the memory sampler import numba and load their loops just after a session opens; a fork
    then (a DataLoader starting its workers) once copied a half-done import into the worker, whose own writer
    waited for its module lock until the DataLoader killed the worker, without its trace's end."""
    import threading
    import time

    from dynascope.trace import forklock

    held, loading = threading.Event(), 0.5

    def load():
        with forklock.lock:
            held.set()
            time.sleep(loading)

    thread = threading.Thread(target=load)
    thread.start()
    held.wait()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    waited = time.monotonic() - started
    os.waitpid(pid, 0)
    thread.join()
    assert waited >= loading * 0.8
