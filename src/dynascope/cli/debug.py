"""`dynascope debug [--out DIR] [--pdb] [--json OUT] SCRIPT [args]`: run a script with every frame Dynamo
compiles running from decompiled `.py` files (debug/stepping.py), where breakpoints stop."""

from __future__ import annotations

import argparse
import bdb
import os
import sys
from typing import Any

import orjson

from dynascope.cli._script_line import parse_script_line
from dynascope.console import make_console, say, script_exit_status
from dynascope.debug.stepping import Stepping
from dynascope.scriptrun import check_script, run_script

# Modules `step` walks through without stopping under `--pdb` and `breakpoint()`: torch's own Python
# code (Dynamo's frame callback, guards, the graph call), dynascope's and the standard library's, so
# that stepping into a call of a resume function lands in its decompiled file.
_SKIP_PACKAGES = ("torch", "dynascope", "functorch", "sympy", "numpy", "typing_extensions")


def skip_patterns() -> list[str]:
    names = set(_SKIP_PACKAGES) | set(getattr(sys, "stdlib_module_names", ()))
    names.discard("__main__")
    return sorted(p for n in names for p in (n, f"{n}.*"))


def make_pdb() -> Any:
    """A pdb whose `step` passes over torch, dynascope, the standard library and code compiled from
    strings (what Dynamo evaluates while it compiles, namedtuple methods) without stopping."""
    import pdb

    skipped = {p for p in skip_patterns() if "*" not in p}

    class SteppingPdb(pdb.Pdb):
        def is_skipped_module(self, module_name: Any) -> bool:  # one set lookup, not 600 fnmatch calls
            return isinstance(module_name, str) and module_name.split(".", 1)[0] in skipped

        def lookupmodule(self, filename: str, *rest: Any) -> Any:  # `b dynascope-debug/f_1.py:12` from cwd
            if not os.path.isabs(filename) and os.path.isfile(filename):
                return os.path.abspath(filename)
            return super().lookupmodule(filename, *rest)

        def stop_here(self, frame: Any) -> bool:
            if frame.f_code.co_filename.startswith("<") and frame.f_code.co_filename != "<stdin>":
                return False  # eval'd and generated code: Dynamo's guard text, namedtuple methods
            return bool(super().stop_here(frame))

    return SteppingPdb(skip=skip_patterns())


def _breakpointhook(*args: Any, **kwargs: Any) -> None:
    debugger = make_pdb()
    debugger.set_trace(sys._getframe(1))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dynascope debug",
        description="Run a script with the code Dynamo generates for each compiled function (cache entries "
        "and resume functions) written as decompiled .py files and run from them, so breakpoints there stop "
        "with the locals in view. A file runs only where its code was checked equivalent to Dynamo's; "
        "elsewhere Dynamo's own bytecode runs and the file says why.",
    )
    parser.add_argument("--out", metavar="DIR", default="dynascope-debug",
                        help="where the .py files go (default ./dynascope-debug)")  # fmt: skip
    parser.add_argument("--pdb", action="store_true",
                        help="run the script under pdb; `step` passes over torch and the standard library")  # fmt: skip
    parser.add_argument("--json", metavar="OUT", help="write the list of files as JSON")
    parser.add_argument("-q", "--quiet", action="store_true", help="no summary on stderr")
    parser.add_argument("script", help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    return parser


def main(argv: list[str]) -> int:
    args = parse_script_line(build_parser(), argv)
    script = check_script(args.script)
    stepping = Stepping(args.out)
    saved_hook = sys.breakpointhook
    if not os.environ.get("PYTHONBREAKPOINT"):
        sys.breakpointhook = _breakpointhook
    try:
        with stepping:
            if args.pdb:
                say("debug", f"decompiled files go to {args.out}; set breakpoints there with "
                             f"`b {os.path.join(args.out, '<file>.py')}:LINE`, then `c`")  # fmt: skip
                error = make_pdb().runcall(run_script, script, args.args)
                if isinstance(error, bdb.BdbQuit):  # `q` in pdb: the user stopped the run
                    error = None
            else:
                error = run_script(script, args.args)
    finally:
        sys.breakpointhook = saved_hook
    sys.stdout.flush()
    if args.json:
        payload = {"out_dir": stepping.out_dir, "files": [r.to_dict() for r in stepping.results],
                   "notes": stepping.notes}  # fmt: skip
        with open(args.json, "wb") as out:
            out.write(orjson.dumps(payload, option=orjson.OPT_INDENT_2))
    if not args.quiet:
        print_summary(stepping)
    return script_exit_status("debug", script, error)


def summary_lines(stepping: Stepping) -> list[str]:
    results = stepping.results
    runs = len(stepping.installed)
    head = (f"{len(results)} compiled code objects written to {stepping.out_dir}: {runs} run as decompiled source, "
            f"{len(results) - runs} keep Dynamo's bytecode")
    lines = [head]
    width = max((len(os.path.basename(r.path)) for r in results), default=0)
    for r in results:
        state = "runs" if r.installed else "kept"
        what = f"{r.kind} of {r.function}" if r.kind == "frame" else f"{r.kind}, {r.function}"
        lines.append(f"  {os.path.basename(r.path):<{width}}  {state}  compile id {r.compile_id or '?'}, {what}")
        if not r.installed:
            lines.append(f"  {'':<{width}}        Dynamo's bytecode runs: {r.reason}")
    lines += [f"note: {n}" for n in stepping.notes]
    return lines


def print_summary(stepping: Stepping) -> None:
    console = make_console(sys.stderr, soft_wrap=True)
    for line in summary_lines(stepping):
        console.print(line, markup=False, highlight=False)
