"""A process that has imported torch (with Dynamo and inductor) and numba, and forks a child for each Python
command the tests run, so that a traced run in a test does not import torch anew (about 2.5 s a run on 2 cores).

Run by tests/support/procs.py, one per pytest worker. Requests come on stdin, one JSON line each:
{"argv": [...], "cwd": ..., "env": {...}, "stdout": path, "stderr": path}; for each, a line
{"pid": N} when the child starts, then {"status": waitpid's status} when it ends.

The child is what `python ARGV` would be after torch's import: its own process, environment, working
directory, argv, stdin (/dev/null), stdout and stderr (the files), `__main__`, and a normal interpreter exit
(atexit handlers, an uncaught exception's traceback and exit code 1)."""

import json
import os
import runpy
import sys
import types

import numba
import numba.typed
import torch
import torch._dynamo
import torch._inductor.compile_fx  # noqa: F401

# numba's compiler initialised once (LLVM, its type registries): each child then loads dynascope's cached loops
# (trace writer, memory sampler, trace reader) in milliseconds instead of 0.35 s. No threads are started.
numba.njit(lambda x: x + 1)(1)


def _child(request: dict) -> None:
    os.setpgid(0, 0)  # a test that kills the run's group kills it alone
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, fd)
        os.close(out)
    try:
        _run(request["argv"])
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - what the interpreter does with an uncaught exception
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename in (__file__, runpy.__file__):
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


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            sys.stdin = open(os.devnull)  # noqa: SIM115 - the child's own
            _child(request)  # ends the process as a script's end does
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"status": status}), flush=True)


if __name__ == "__main__":
    main()
