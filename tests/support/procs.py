"""`python ARGS` for the tests, as `subprocess.run` and `subprocess.Popen` run it, but forked from a process that
has imported torch already (tests/support/zygote.py): a traced run then does not spend some 2.5 s importing
torch, Dynamo and inductor, which on 2 cores was a third of the default suite.

    done = procs.run([sys.executable, "-m", "dynascope.cli", "run", "--out", out, script], cwd=tmp, env=env)
    proc = procs.popen([sys.executable, script], stdout=subprocess.PIPE, text=True)  # a subprocess.Popen

What runs is the same program in its own process (environment, working directory, argv, standard files, exit
code, signals, atexit handlers, an uncaught exception's traceback); only torch's import came before it. So a
command runs through a zygote only where nothing that torch or Python reads at start-up differs: the environment
variables under IMPORT_TIME_PREFIXES are those the zygote was started with (PYTHONPATH and PYTHONWARNINGS aside:
the child applies them itself). Each such environment gets its own zygote, started by the first command that
asks for it. Anything else (interpreter options, Popen options other than the standard files, working
directory, environment and a new session, a command that is not Python) runs as a plain subprocess, and so does
everything where DYNASCOPE_TESTS_ZYGOTE=0. The returned object is a subprocess.Popen either way: only its start
and its wait go through the zygote.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

TESTS = Path(__file__).parents[1]
# read by Python, torch, numba or the libraries they load when they start (OMP_NUM_THREADS by libgomp at load)
IMPORT_TIME_PREFIXES = ("PYTHON", "TORCH", "PYTORCH", "OMP_", "MKL_", "KMP_", "CUDA", "LD_", "NCCL", "GLOO", "NUMBA")
# ... of which the zygote's child applies these itself, as the interpreter does at start (zygote.py's _start_as):
# a command that sets them can share the zygote, unless its PYTHONPATH shadows a module the zygote imported
APPLIED = ("PYTHONPATH", "PYTHONWARNINGS")
# the Popen options a zygote's child honours; any other runs the command as a plain subprocess
FORKABLE = {"stdin", "stdout", "stderr", "text", "universal_newlines", "encoding", "errors", "bufsize", "cwd", "env",
            "start_new_session"}  # fmt: skip
_zygotes: dict[tuple, _Zygote | None] = {}
children_cpu = 0.0  # CPU seconds of the commands run through zygotes so far (with their children), for the CPU log


def run(cmd: list[Any], *, timeout: float | None = None, check: bool = False, capture_output: bool = False,
        input: str | bytes | None = None, **kwargs: Any) -> subprocess.CompletedProcess:  # fmt: skip
    """subprocess.run(cmd, ...) for a Python command, through a zygote where it can be (see the module's doc); a
    command that times out is killed with its process group."""
    if capture_output:
        kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    with popen(cmd, **kwargs) as proc:
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                if isinstance(proc, _Forked):
                    os.killpg(proc.pid, signal.SIGKILL)
                else:
                    proc.kill()
            out, err = proc.communicate()
            raise subprocess.TimeoutExpired(proc.args, timeout or 0, out, err) from None
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done


def popen(cmd: list[Any], **kwargs: Any) -> subprocess.Popen:
    """subprocess.Popen(cmd, **kwargs) for a Python command, forked from a zygote where it can be."""
    cmd = [str(part) for part in cmd]
    argv = python_argv(cmd)
    if argv is None or set(kwargs) - FORKABLE or os.environ.get("DYNASCOPE_TESTS_ZYGOTE") == "0":
        return subprocess.Popen(cmd, **kwargs)
    env = dict(os.environ if kwargs.get("env") is None else kwargs["env"])
    cwd = os.fspath(kwargs.get("cwd") or os.getcwd())
    key = tuple(sorted((k, v) for k, v in env.items() if k.startswith(IMPORT_TIME_PREFIXES) and k not in APPLIED))
    zygote = _zygote(key, env)
    if zygote is None or not zygote.ready():
        _zygotes[key] = None  # no zygote for this environment (it could not import torch): never try it again
    elif not _shadowed(env.get("PYTHONPATH", ""), cwd) & zygote.modules:
        with contextlib.suppress(_ZygoteGone):
            return _Forked(zygote, argv, cmd, **{**kwargs, "env": env, "cwd": cwd})
    return subprocess.Popen(cmd, **kwargs)


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


def _shadowed(pythonpath: str, cwd: str) -> set[str]:
    """The top-level module names that the folders on `pythonpath` hold."""
    names = set()
    for folder in filter(None, pythonpath.split(os.pathsep)):
        with contextlib.suppress(OSError):
            names.update(name.partition(".")[0] for name in os.listdir(os.path.join(cwd, folder)))
    return names


def _zygote(key: tuple, env: dict[str, str]) -> _Zygote | None:
    zygote = _zygotes.get(key)
    if key not in _zygotes or (zygote is not None and not zygote.alive()):
        _zygotes[key] = zygote = _Zygote.start(env)
    return zygote


class _ZygoteGone(OSError):
    """The zygote ended (it could not start, or died): its commands cannot be started or waited for."""


class _Forked(subprocess.Popen):
    """A Popen whose process a zygote forked: Popen's own pipes, reading, signals and timeouts; the start and the
    exit status come from the zygote, whose child the process is."""

    def __init__(self, zygote: _Zygote, argv: list[str], cmd: list[str], **kwargs: Any) -> None:
        self._zygote, self._argv = zygote, argv
        super().__init__(cmd, **kwargs)

    def _execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo,
                       creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite,
                       *rest) -> None:  # fmt: skip
        """Where Popen would fork and exec: ask the zygote (restore_signals, ids, umask, start_new_session and,
        from 3.11, process_group follow in `rest`; only start_new_session is passed on)."""
        files = [p2cread if p2cread != -1 else 0, c2pwrite if c2pwrite != -1 else 1, errwrite if errwrite != -1 else 2]
        request = {"argv": self._argv, "cwd": cwd, "env": env, "session": bool(rest[5]),
                   "ranks": _torchrun_ranks(self._argv)}  # fmt: skip
        self.pid = self._zygote.fork(request, files)
        self._child_created = True
        devnull = getattr(self, "_devnull", None)  # the child's ends are closed here, as Popen's own start does
        for child_end, own_end in ((p2cread, p2cwrite), (c2pwrite, c2pread), (errwrite, errread)):
            if child_end != -1 and own_end != -1 and child_end != devnull:
                os.close(child_end)
        if devnull is not None:
            os.close(devnull)
        self._closed_child_pipe_fds = True

    def _try_wait(self, wait_flags: int) -> tuple[int, int]:
        status = self._zygote.status(self.pid, block=not wait_flags & os.WNOHANG)
        return (0, 0) if status is None else (self.pid, status)

    def _internal_poll(self, _deadstate: int | None = None, *args: Any, **kwargs: Any) -> int | None:
        if self.returncode is None:
            try:
                status = self._zygote.status(self.pid, block=False)
            except _ZygoteGone:
                status = None
                if _deadstate is not None:
                    self.returncode = _deadstate
            if status is not None:
                self._handle_exitstatus(status)
        return self.returncode


class _Zygote:
    def __init__(self, proc: subprocess.Popen, channel: socket.socket) -> None:
        self.proc = proc
        self.channel = channel
        self.modules: set[str] = set()  # the top-level modules it imported, once it says
        self.ended: dict[int, int] = {}  # pid -> wait status, of its children that ended and no Popen asked about
        self.said_hello = False

    @classmethod
    def start(cls, env: dict[str, str]) -> _Zygote | None:
        env = {k: v for k, v in env.items() if k not in APPLIED}
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            proc = subprocess.Popen([sys.executable, "-m", "support.zygote", str(theirs.fileno())], cwd=TESTS,
                                    pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, env=env)  # fmt: skip
        except OSError:
            return None
        finally:
            theirs.close()
        zygote = cls(proc, ours)
        atexit.register(zygote.stop)
        return zygote

    def alive(self) -> bool:
        return self.proc.poll() is None

    def ready(self) -> bool:
        """Whether it has imported what it imports (it waits for that) and can fork."""
        if not self.said_hello:
            with contextlib.suppress(_ZygoteGone):
                self.modules = set(self._message(None)["modules"])
                self.said_hello = True
        return self.said_hello

    def stop(self) -> None:
        self.channel.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def fork(self, request: dict, files: list[int]) -> int:
        """The pid of a child forked for `request`, whose standard files are `files`."""
        try:
            socket.send_fds(self.channel, [json.dumps(request).encode()], files)
        except OSError as exc:
            raise _ZygoteGone(str(exc)) from exc
        while True:
            message = self._message(None)
            if "status" not in message:
                return message["pid"]
            self._ended(message)

    def status(self, pid: int, block: bool) -> int | None:
        """The wait status of child `pid` once it has ended; None while it runs (block=False)."""
        while pid not in self.ended:
            message = self._message(None if block else 0)
            if message is None:
                return None
            self._ended(message)
        return self.ended.pop(pid)

    def _ended(self, message: dict) -> None:
        global children_cpu
        children_cpu += message["cpu"]
        self.ended[message["pid"]] = message["status"]

    def _message(self, timeout: float | None) -> dict | None:
        """Its next message; None if none came within `timeout` seconds."""
        with selectors.DefaultSelector() as selector:
            selector.register(self.channel, selectors.EVENT_READ)
            if not selector.select(timeout):
                return None
        try:
            data = self.channel.recv(1 << 20)  # one message (SOCK_SEQPACKET cuts what does not fit)
        except OSError as exc:
            raise _ZygoteGone(str(exc)) from exc
        if not data:
            raise _ZygoteGone("the zygote ended")
        return json.loads(data)
