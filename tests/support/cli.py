"""`dynascope ARGS` run in the test's own process, for the commands that only read a run's files (report,
explain DIR, convert, diff): the same `main(argv)` as the console script, its output piped (no COLUMNS), at
the cost of no interpreter start. Commands that run a script still run in a subprocess, as a user runs them."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess


def dynascope_here(*args: str, cwd: str | os.PathLike = ".") -> subprocess.CompletedProcess:
    """`dynascope ARGS` in `cwd`: a CompletedProcess with its exit code, stdout and stderr."""
    from dynascope.cli import main as dynascope_main

    stdout, stderr = (io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True) for _ in range(2))
    columns = os.environ.pop("COLUMNS", None)
    here = os.getcwd()
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                code = dynascope_main([str(a) for a in args])
            except SystemExit as exit_:  # argparse
                code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        os.chdir(here)
        if columns is not None:
            os.environ["COLUMNS"] = columns
    text = [stream.buffer.getvalue().decode() for stream in (stdout, stderr)]  # type: ignore[attr-defined]
    return subprocess.CompletedProcess(["dynascope", *args], code, *text)
