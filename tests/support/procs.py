"""`python ARGS` for the tests, as `subprocess.run(cmd, capture_output=True, text=True, check=False)` runs it, but
forked from a process that has imported torch already (tests/support/zygote.py): a traced run then does not
spend some 2.5 s importing torch, Dynamo and inductor, which on 2 cores was a third of the default suite.

    done = procs.run([sys.executable, "-m", "dynascope.cli", "run", "--out", out, script], cwd=tmp, env=env)

What runs is the same program in its own process (environment, working directory, argv, files, exit code,
atexit handlers, an uncaught exception's traceback); only torch's import came before it. So a command runs
through a zygote only where nothing that torch or Python reads at start-up differs: the environment
variables under IMPORT_TIME_PREFIXES are those the zygote was started with. Each such environment gets its
own zygote, started by the first command that asks for it. Anything else (other interpreter options,
standard input, a command that is not Python) runs as a plain subprocess, and so does everything where
DYNASCOPE_TESTS_ZYGOTE=0.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

TESTS = Path(__file__).parents[1]
# read by Python, torch, numba or the libraries they load when they start (OMP_NUM_THREADS by libgomp at load)
IMPORT_TIME_PREFIXES = ("PYTHON", "TORCH", "PYTORCH", "OMP_", "MKL_", "KMP_", "CUDA", "LD_", "NCCL", "GLOO", "NUMBA")
# ... of which the zygote's child applies these itself, as the interpreter does at start (zygote.py's _start_as):
# a command that sets them can share the zygote, unless its PYTHONPATH shadows a module the zygote imported
APPLIED = ("PYTHONPATH", "PYTHONWARNINGS")
_zygotes: dict[tuple, _Zygote | None] = {}


def run(cmd: list[Any], *, cwd: str | os.PathLike | None = None, env: dict[str, str] | None = None,
        timeout: float | None = None, capture_output: bool = True, text: bool = True, check: bool = False,
        **kwargs: Any) -> subprocess.CompletedProcess:  # fmt: skip
    """subprocess.run(cmd, ...) for a Python command, through a zygote where it can be (see the module's doc)."""
    cmd = [str(part) for part in cmd]
    env = dict(os.environ if env is None else env)
    argv = python_argv(cmd)
    if argv is None or kwargs or not (capture_output and text) or check or os.environ.get("DYNASCOPE_TESTS_ZYGOTE") == "0":
        return subprocess.run(cmd, cwd=cwd, env=env, timeout=timeout, capture_output=capture_output, text=text,
                              check=check, **kwargs)  # fmt: skip
    key = tuple(sorted((k, v) for k, v in env.items() if k.startswith(IMPORT_TIME_PREFIXES) and k not in APPLIED))
    zygote = _zygote(key, env)
    cwd = os.fspath(cwd or os.getcwd())
    done = zygote.run(cmd, argv, cwd, env, timeout) if zygote is not None else None
    if done is None:  # no zygote for this environment (it could not import torch), or its imports are shadowed
        if zygote is None or not zygote.alive():
            _zygotes[key] = None  # never try it again
        return subprocess.run(cmd, cwd=cwd, env=env, timeout=timeout, capture_output=True, text=True, check=False)
    return done


def python_argv(cmd: list[str]) -> list[str] | None:
    """What follows `python` in `cmd`: ["-m", module, ...], ["-c", code, ...] or [script, ...]; a console script
    of this interpreter (`.venv/bin/dynascope`) is its file; None for anything else."""
    if cmd[0] == sys.executable:
        rest = cmd[1:]
    elif _is_console_script(cmd[0]):
        rest = cmd
    else:
        return None
    if not rest or (rest[0].startswith("-") and rest[0] not in ("-m", "-c")) or (rest[0] in ("-m", "-c") and len(rest) < 2):
        return None
    return rest


def _torchrun_ranks(argv: list[str]) -> int:
    """How many workers a torchrun command starts on this node (its --nproc-per-node), 0 for another command."""
    if argv[:2] == ["-m", "torch.distributed.run"]:
        options = argv[2:]
    elif os.path.basename(argv[0]) == "torchrun":
        options = argv[1:]
    else:
        return 0
    for i, option in enumerate(options):
        name, _, value = option.partition("=")
        if name in ("--nproc-per-node", "--nproc_per_node"):
            value = value or (options[i + 1] if i + 1 < len(options) else "")
            return int(value) if value.isdigit() else 0
        if not option.startswith("-"):
            break  # the worker's command: its options are its own
    return 1


def _is_console_script(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.readline().strip() == b"#!" + os.fsencode(sys.executable)
    except OSError:
        return False


def _zygote(key: tuple, env: dict[str, str]) -> _Zygote | None:
    zygote = _zygotes.get(key)
    if key not in _zygotes or (zygote is not None and not zygote.alive()):
        _zygotes[key] = zygote = _Zygote.start(env)
    return zygote


class _Zygote:
    def __init__(self, proc: subprocess.Popen, scratch: str) -> None:
        self.proc = proc
        self.scratch = scratch
        self.pending = b""
        self.modules: set[str] | None = None  # the top-level modules it imported, once it says

    @classmethod
    def start(cls, env: dict[str, str]) -> _Zygote | None:
        env = {k: v for k, v in env.items() if k not in APPLIED}
        try:
            proc = subprocess.Popen([sys.executable, "-m", "support.zygote"], cwd=TESTS, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True,
                                    bufsize=1)  # fmt: skip
        except OSError:
            return None
        zygote = cls(proc, tempfile.mkdtemp(prefix="dynascope-zygote-"))
        atexit.register(zygote.stop)
        return zygote

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def run(self, cmd: list[str], argv: list[str], cwd: str, env: dict[str, str],
            timeout: float | None) -> subprocess.CompletedProcess | None:  # fmt: skip
        """The command's result, or None where this zygote cannot run it (it died, never started, or has imported a
        module that the command's PYTHONPATH would shadow)."""
        if self.modules is None:
            hello = self._reply(None)  # the zygote's first line, once it has imported what it imports
            if hello is None:
                return None
            self.modules = set(hello["modules"])
        if _shadowed(env.get("PYTHONPATH", ""), cwd) & self.modules:
            return None
        out, err = os.path.join(self.scratch, "stdout"), os.path.join(self.scratch, "stderr")
        request = {"argv": argv, "cwd": cwd, "env": env, "stdout": out, "stderr": err, "ranks": _torchrun_ranks(argv)}
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            started = self._reply(None)  # the zygote answers once it has imported torch and forked
        except OSError:  # it could not start (no torch here)
            started = None
        if started is None:
            return None
        pid = started["pid"]
        ended = self._reply(timeout)
        if ended is None:
            with contextlib.suppress(ProcessLookupError):  # already gone: the zygote itself died
                os.killpg(pid, signal.SIGKILL)
            self._reply(None)
            raise subprocess.TimeoutExpired(cmd, timeout or 0, _read(out), _read(err))
        return subprocess.CompletedProcess(cmd, os.waitstatus_to_exitcode(ended["status"]), _read(out), _read(err))

    def _reply(self, timeout: float | None) -> dict | None:
        """The zygote's next line, read from its pipe unbuffered (two replies may arrive in one read)."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.pending:
            with selectors.DefaultSelector() as selector:
                selector.register(fd, selectors.EVENT_READ)
                if not selector.select(timeout):
                    return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return json.loads(line)


def _shadowed(pythonpath: str, cwd: str) -> set[str]:
    """The top-level module names that the folders on `pythonpath` hold."""
    names = set()
    for folder in filter(None, pythonpath.split(os.pathsep)):
        with contextlib.suppress(OSError):
            names.update(name.partition(".")[0] for name in os.listdir(os.path.join(cwd, folder)))
    return names


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()
