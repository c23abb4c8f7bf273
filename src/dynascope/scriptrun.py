"""Run a user script as `__main__`, the way `python script.py args` would, and hand back its error.

Shared by `dynascope explain` and `dynascope run`: both need to write their reports before the
script's own exception propagates.
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Callable

from dynascope.errors import DynascopeError


class ScriptError(DynascopeError, FileNotFoundError):
    """The script to run does not exist or cannot be read."""


def check_script(path: str) -> str:
    """The absolute path of a readable script, or ScriptError saying what is wrong."""
    full = os.path.abspath(path)
    if not os.path.exists(full):
        raise ScriptError(f"script not found: {path} (give the path of a Python file, e.g. examples/toy_example.py)")
    if os.path.isdir(full) and not os.path.exists(os.path.join(full, "__main__.py")):
        raise ScriptError(f"{path} is a directory without __main__.py; give the path of a Python file")
    if not os.path.isdir(full):
        try:
            with open(full, "rb") as fh:
                fh.read(1)
        except OSError as exc:
            raise ScriptError(f"cannot read script {path}: {exc.strerror or exc}") from exc
    return full


def check_module(name: str) -> str:
    """The file of module `name` (as `python -m name` would run it), or ScriptError saying what is wrong."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:
        raise ScriptError(f"cannot find module {name}: {exc}") from None
    if spec is not None and spec.submodule_search_locations is not None:  # a package: its __main__
        try:
            spec = importlib.util.find_spec(f"{name}.__main__")
        except (ImportError, ValueError):
            spec = None
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        raise ScriptError(f"module not found: {name} (give an importable module, as for python -m)")
    return os.path.abspath(spec.origin)


def run_module(name: str, args: list[str]) -> BaseException | None:
    """`python -m name args` in this process: as run_script, through runpy.run_module."""
    argv = [check_module(name), *args]
    return _run_main(argv, os.getcwd(), lambda: runpy.run_module(name, run_name="__main__", alter_sys=True))


def _run_main(argv: list[str], first_on_path: str, run: Callable[[], object]) -> BaseException | None:
    """run() with sys.argv = argv and `first_on_path` first on sys.path, both restored afterwards: None on
    success (SystemExit(0) or None counts as success), else the exception it raised."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = argv
    sys.path.insert(0, first_on_path)
    try:
        run()
    except SystemExit as exc:
        if exc.code in (None, 0):
            return None
        return exc
    except BaseException as exc:  # noqa: BLE001 - handed back to the caller, who re-raises it
        return exc
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return None


def run_script(path: str, args: list[str]) -> BaseException | None:
    """Run `path` as __main__ with sys.argv = [path, *args] and its directory first on sys.path.

    Returns None on success (SystemExit(0) or None counts as success), else the exception the script
    raised (SystemExit with a non-zero code included), with its traceback attached, so the caller can
    write its report and then `raise` it. sys.argv and sys.path are restored afterwards.
    """
    full = check_script(path)
    directory = full if os.path.isdir(full) else os.path.dirname(full)
    return _run_main([path, *args], directory, lambda: runpy.run_path(full, run_name="__main__"))


def strip_our_frames(exc: BaseException) -> BaseException:
    """Drop the traceback frames of dynascope and runpy above the user's script, so a re-raised error
    shows the user's traceback, not ours."""
    tb = exc.__traceback__
    ours_dir = os.path.dirname(os.path.abspath(__file__))
    runpy_file = os.path.abspath(runpy.__file__)

    def is_ours(filename: str) -> bool:
        if filename.startswith("<frozen runpy"):
            return True
        return os.path.abspath(filename).startswith(ours_dir + os.sep) or os.path.abspath(filename) == runpy_file

    while tb is not None and tb.tb_next is not None and is_ours(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return exc.with_traceback(tb)
