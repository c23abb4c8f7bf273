"""A process that has imported torch (with Dynamo and inductor) and numba, and forks a child for each Python
command the tests run, so that a traced run in a test does not import torch anew (about 2.5 s a run on 2 cores).

Run by tests/support/procs.py, one per pytest worker and start-up environment, with one end of a
SOCK_SEQPACKET socket pair (its file descriptor number is its argument). Each message is a JSON object. It first
sends {"modules": [the top-level modules it imported]}; then, for each request {"argv": [...], "cwd": ...,
"env": {...}, "session": bool, "ranks": N} that arrives with three file descriptors (the command's stdin, stdout
and stderr), it forks a child and answers {"pid": N}, and when that child ends, {"pid": N, "status": waitpid's
status, "cpu": its CPU seconds with its children's}. Children run side by side; the zygote ends when the socket
closes.

The child is what `python ARGV` would be after torch's import: its own process (in its own process group, or
session where asked), environment, working directory, argv, standard files, `__main__`, and a normal
interpreter exit (atexit handlers, an uncaught exception's traceback and exit code 1).

A torchrun launch ("ranks": N) saves the ranks' imports too: before torchrun runs, while the child is still
single-threaded, it forks N idle copies of itself ("embryos"), and torchrun's worker start-up
(SubprocessHandler._popen) hands a Python worker command to one of them instead of starting an interpreter.
The worker is then the launcher's child as before (a Popen whose pid torchrun polls, signals and waits for),
in its own session, with the environment torchrun gave it. A worker that needs anything else (redirected
output, another interpreter's options, a variable read at start-up that differs) starts as torchrun starts
it."""

import json
import os
import runpy
import selectors
import socket
import subprocess
import sys
import types
import warnings

import numba
import numba.typed
import torch
import torch._dynamo
import torch._inductor.compile_fx  # noqa: F401
from torch.distributed.elastic.multiprocessing.subprocess_handler import subprocess_handler

from support.procs import IMPORT_TIME_PREFIXES, python_argv

# numba's compiler initialised once (LLVM, its type registries): each child then loads dynascope's cached loops
# (trace writer, memory sampler, trace reader) in milliseconds instead of 0.35 s. No threads are started.
numba.njit(lambda x: x + 1)(1)


def _child(request: dict, files: list[int]) -> None:
    if request["session"]:
        os.setsid()
    else:
        os.setpgid(0, 0)  # a test that kills the run's group kills it alone
    os.chdir(request["cwd"])
    _start_as(request["env"])
    for fd, given in enumerate(files):
        os.dup2(given, fd)
    for given in set(files) - {0, 1, 2}:
        os.close(given)
    if request.get("ranks"):
        _hand_workers_to(_embryos(request["ranks"]))
    _main(request["argv"])


def _start_as(env: dict[str, str]) -> None:
    """Take `env` as this process's environment, and PYTHONPATH and PYTHONWARNINGS in it as the interpreter takes
    them at start (procs.py starts the zygote without them): the folders after the script's own on sys.path,
    the warning filters before the default ones."""
    os.environ.clear()
    os.environ.update(env)
    sys.path[1:1] = [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    options = [o for o in env.get("PYTHONWARNINGS", "").split(",") if o]
    if options:
        sys.warnoptions[:] = options
        warnings._processoptions(options)


def _main(argv: list[str]) -> None:
    """Run ARGV as `python ARGV` does, and end the process as it would."""
    try:
        _run(argv)
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - what the interpreter does with an uncaught exception
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename in (__file__, runpy.__file__, "<frozen runpy>"):
            tb = tb.tb_next  # the user's frames only, as `python ARGV` shows them
        sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, tb
        if sys.version_info >= (3, 12):
            sys.last_exc = exc
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        sys.exit(1)
    sys.exit(0)


def _run(argv: list[str]) -> None:
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        sys.path[0] = os.getcwd()
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    elif argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        sys.path[0] = ""
        main = sys.modules["__main__"] = types.ModuleType("__main__")
        exec(compile(argv[1], "<string>", "exec"), main.__dict__)
    else:
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(os.path.realpath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")


def _embryos(count: int) -> list[tuple[int, int]]:
    """(pid, pipe to it) of `count` forked copies of this process, each waiting for the command it is to run."""
    embryos: list[tuple[int, int]] = []
    for _ in range(count):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(write)
            for _, other in embryos:
                os.close(other)
            _embryo(read)
        os.close(read)
        embryos.append((pid, write))
    return embryos


def _embryo(pipe: int) -> None:
    """Wait for a worker's command (a JSON {"argv", "env"} and end of file) and run it, or end with the launcher."""
    data = b""
    while chunk := os.read(pipe, 1 << 16):
        data += chunk
    os.close(pipe)
    if not data:
        os._exit(0)  # the launcher ended without needing this one
    request = json.loads(data)
    os.setsid()  # as torchrun's Popen(start_new_session=True): it signals the worker's group
    os.environ.clear()
    os.environ.update(request["env"])  # its PYTHONPATH and warnings are the launcher's, applied already
    _main(request["argv"])


class _Handed(subprocess.Popen):
    """A Popen of a worker handed to an embryo: everything but the start is Popen's own (poll, wait, signals)."""

    def __init__(self, embryo: tuple[int, int], argv: list[str], env: dict[str, str]) -> None:
        self._embryo, self._request = embryo, json.dumps({"argv": argv, "env": env}).encode()
        super().__init__([sys.executable, *argv], env=env, start_new_session=True)

    def _execute_child(self, *args, **kwargs) -> None:
        pid, pipe = self._embryo
        view = memoryview(self._request)
        while view:
            view = view[os.write(pipe, view) :]
        os.close(pipe)
        self.pid = pid
        self._child_created = True


def _hand_workers_to(embryos: list[tuple[int, int]]) -> None:
    """Make torchrun's worker start-up hand each Python worker it can to an embryo."""
    started = dict(os.environ)
    original = subprocess_handler.SubprocessHandler._popen

    def _popen(self, args, env):
        argv = _worker_argv([str(a) for a in args], env, started)
        if argv is None or not embryos or self._stdout is not None or self._stderr is not None:
            return original(self, args, env)
        return _Handed(embryos.pop(0), argv, env)

    subprocess_handler.SubprocessHandler._popen = _popen


def _worker_argv(args: list[str], env: dict[str, str], started: dict[str, str]) -> list[str] | None:
    """What follows `python` in a worker's command, where an embryo runs it as that command would run: the
    variables read at start-up are those this process started with (aside from those torchrun sets for its
    workers, read when they run: TORCHELASTIC_*, and TORCH_NCCL_* for a NCCL group), and torchrun's `-u` (some
    versions) is what PYTHONUNBUFFERED already gives."""
    if args[0] == sys.executable and args[1:2] == ["-u"] and env.get("PYTHONUNBUFFERED"):
        args = [args[0], *args[2:]]
    argv = python_argv(args)

    def at_start(variables: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in variables.items() if k.startswith(IMPORT_TIME_PREFIXES)
                and not k.startswith(("TORCHELASTIC_", "TORCH_NCCL_"))}  # fmt: skip

    return argv if argv is not None and at_start(env) == at_start(started) else None


def main() -> None:
    if not hasattr(os, "pidfd_open"):
        return  # (Linux 5.3 and Python 3.9 have it) procs.py then runs every command as a plain subprocess
    channel = socket.socket(fileno=int(sys.argv[1]))
    channel.send(json.dumps({"modules": sorted({name.partition(".")[0] for name in sys.modules})}).encode())
    selector = selectors.DefaultSelector()
    selector.register(channel, selectors.EVENT_READ)
    children: dict[int, int] = {}  # pidfd -> pid
    while True:
        for key, _ in selector.select():
            if key.fileobj is not channel:  # a child ended
                selector.unregister(key.fd)
                os.close(key.fd)
                _, status, usage = os.wait4(children.pop(key.fd), 0)
                reply = {"pid": key.data, "status": status, "cpu": usage.ru_utime + usage.ru_stime}
                channel.send(json.dumps(reply).encode())
                continue
            message, files, _, _ = socket.recv_fds(channel, 1 << 20, 3)
            if not message:
                return  # the tests are done
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                selector.close()
                channel.close()
                for pidfd in children:
                    os.close(pidfd)
                _child(json.loads(message), files)  # ends the process as a script's end does
            for fd in files:
                os.close(fd)
            pidfd = os.pidfd_open(pid)
            children[pidfd] = pid
            selector.register(pidfd, selectors.EVENT_READ, pid)
            channel.send(json.dumps({"pid": pid}).encode())


if __name__ == "__main__":
    main()
