"""The tests' zygote (support/procs.py, support/zygote.py): a command forked from it behaves as `python ARGV`
started afresh does, and it really is forked (torch imported before the program's first line)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from support import procs

PROBE = textwrap.dedent("""\
    import json, os, sys, warnings
    forked = "torch" in sys.modules
    warnings.warn("the probe's warning")
    print(json.dumps({"argv": sys.argv, "path0": sys.path[0], "path1": sys.path[1], "cwd": os.getcwd(),
                      "probe": os.environ.get("PROBE"), "main": __name__, "stdin": sys.stdin.read(),
                      "own_group": os.getpgid(0) == os.getpid(), "forked": forked}))
    sys.stdout.flush()
    if sys.argv[1] == "raise":
        def fails():
            raise RuntimeError("the probe's failure")
        fails()
    if sys.argv[1] == "wait":
        print("ready", flush=True)
        import time
        time.sleep(60)
    sys.exit(int(sys.argv[1]))
""")


@pytest.fixture
def probe(tmp_path):
    (tmp_path / "extra").mkdir()
    (tmp_path / "probe.py").write_text(PROBE)
    env = {**os.environ, "PROBE": "1", "PYTHONPATH": str(tmp_path / "extra"), "PYTHONWARNINGS": "error::DeprecationWarning"}
    return tmp_path, env


def _both(probe, *args: str, **kwargs):
    """(through the zygote, as a plain subprocess) of `python probe.py ARGS`."""
    tmp, env = probe
    cmd = [sys.executable, str(tmp / "probe.py"), *args]
    common = dict(cwd=tmp, env=env, capture_output=True, text=True, timeout=120, **kwargs)
    return procs.run(cmd, **common), subprocess.run(cmd, check=False, **common)


def _seen(done) -> dict:
    return json.loads(done.stdout.splitlines()[0])


def test_a_forked_command_sees_what_a_fresh_interpreter_sees(probe):
    forked, fresh = _both(probe, "3", input="from stdin")
    seen, expected = _seen(forked), _seen(fresh)
    assert seen.pop("forked") and not expected.pop("forked")
    # the one difference, on purpose: a forked command leads a process group, so that a timeout kills it whole
    assert seen.pop("own_group") and not expected.pop("own_group")
    assert seen == expected  # argv, sys.path, directory, environment, __main__, stdin
    assert _seen(fresh)["path1"].endswith("extra") and _seen(fresh)["stdin"] == "from stdin"
    assert forked.returncode == fresh.returncode == 3
    assert forked.stderr == fresh.stderr and "UserWarning: the probe's warning" in fresh.stderr


def test_a_forked_commands_uncaught_exception_reads_as_a_fresh_ones(probe):
    forked, fresh = _both(probe, "raise")
    assert forked.returncode == fresh.returncode == 1
    assert forked.stderr == fresh.stderr and fresh.stderr.splitlines()[-1] == "RuntimeError: the probe's failure"
    assert "zygote" not in forked.stderr


def test_warning_options_apply_as_at_start(probe):
    tmp, env = probe
    forked, fresh = _both((tmp, {**env, "PYTHONWARNINGS": "ignore"}), "0")
    assert forked.stderr == fresh.stderr == ""


def test_a_popen_from_the_zygote_streams_and_dies_of_its_signal(probe):
    tmp, env = probe
    proc = procs.popen([sys.executable, str(tmp / "probe.py"), "wait"], cwd=tmp, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True, start_new_session=True)  # fmt: skip
    assert isinstance(proc, subprocess.Popen)
    assert json.loads(proc.stdout.readline())["forked"]
    assert proc.stdout.readline().strip() == "ready" and proc.poll() is None
    assert os.getsid(proc.pid) == proc.pid  # start_new_session, as asked
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    proc.stdout.close()


def test_torchruns_workers_are_forked_too_each_in_a_session_of_its_own(tmp_path):
    from ranks.launch import torchrun

    (tmp_path / "rank.py").write_text(textwrap.dedent("""\
        import os, sys
        forked = "torch" in sys.modules
        with open(f"rank{os.environ['RANK']}.txt", "w") as f:
            f.write(f"{forked} {os.getsid(0) == os.getpid()} {sys.argv[1:]}")
    """))
    done = torchrun([str(tmp_path / "rank.py"), "an-arg"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    for rank in (0, 1):  # forked, in a session of its own (as torchrun starts a worker), with its arguments
        assert (tmp_path / f"rank{rank}.txt").read_text() == "True True ['an-arg']"
