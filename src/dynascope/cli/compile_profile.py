"""`dynascope compile-profile [--json OUT] [--pstats FILE] [--top N] SCRIPT [args]`.

Our options go before the script; everything after it is the script's (cli/_script_line.py).
"""

from __future__ import annotations

import argparse
import os
import re
import sys

from dynascope.artifacts.compile_profile import CompileProfile, save_compile_profile
from dynascope.cli._script_line import parse_script_line
from dynascope.console import make_console, say, script_exit_status
from dynascope.render._fmt import fmt_us
from dynascope.render._table import Column, FitTable, fit_table

USAGE = "dynascope compile-profile [--json OUT] [--pstats FILE] [--top N] script.py [script args]"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dynascope compile-profile", usage=USAGE,
        description="Run a script and show where its torch.compile time goes: per compiled frame and phase "
                    "(Dynamo tracing, guards, restarts, AOTAutograd, backend, caches), the user functions and "
                    "lines that cost Dynamo most to trace (torch internals folded into the user line that "
                    "called them), and what each graph break and recompile cost, at its line.",
    )
    p.add_argument("--json", metavar="OUT", help="write the profile as JSON (docs/debug.md)")
    p.add_argument("--pstats", metavar="FILE", help="write a profile that `python -m pstats` and snakeviz open")
    p.add_argument("--top", type=int, default=10, metavar="N", help="rows per table on the terminal (default 10)")
    p.add_argument("script", help="the Python script to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    return p


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    ns = parse_script_line(_parser(), argv)
    return ns, ns.args


def main(argv: list[str]) -> int:
    ns, script_args = parse(argv)
    from dynascope.debug.compile_profile import CompileProfiler
    from dynascope.scriptrun import check_script, run_script

    script = check_script(ns.script)
    prof = CompileProfiler(script=script).start()
    error: BaseException | None = None
    try:
        error = run_script(script, script_args)
    finally:
        result = prof.stop(error)
    sys.stdout.flush()
    print_profile(result, top=ns.top)
    if ns.json:
        save_compile_profile(result, ns.json)
        say("compile-profile", f"wrote {ns.json}")
    if ns.pstats:
        result.write_pstats(ns.pstats)
        say("compile-profile", f"wrote {ns.pstats} (python -m pstats {ns.pstats}, or snakeviz {ns.pstats})")
    return script_exit_status("compile-profile", script, error)


def print_profile(result: CompileProfile, top: int = 10) -> None:
    """The profile: its tables fitted to the terminal's width (render/_table.py), its other lines whole."""
    console = make_console(soft_wrap=True)
    for part in profile_lines(result, top):
        if isinstance(part, str):
            console.print(part, markup=False, highlight=False)
        else:
            console.print(part, soft_wrap=False)  # its title wraps at the width too


def _where(file: str | None, line: int | None) -> str:
    if not file:
        return "?"
    rel = os.path.relpath(file) if os.path.isabs(file) else file
    return f"{file if rel.startswith('..') else rel}:{line if line is not None else '?'}"


def _frame_name(name: str | None) -> str:
    m = re.match(r"^torch_dynamo_resume_in_(.+)_at_(\d+)$", name or "")
    return f"{m.group(1)} after the graph break at line {m.group(2)}" if m else str(name)


def _t(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _secs(seconds: float) -> str:
    return fmt_us(seconds * 1e6)


def profile_lines(result: CompileProfile, top: int = 10) -> list[str | FitTable]:
    """The profile, biggest costs first: lines, and the user functions and lines as tables (they fit the
    width they are printed at; a narrow one leaves out, first to last: instrs, traced, incl; code,
    function, incl)."""
    frames = result.frames
    out: list[str | FitTable] = [
        (f"compile profile: {len(frames)} compile{'s' if len(frames) != 1 else ''} took {result.compile_s:.3f} s; "
         f"Dynamo spent {result.tracing_s:.3f} s tracing your code")]  # fmt: skip
    if result.functions:
        out.append("")
        table = fit_table("user functions, by Dynamo tracing time (torch internals they called included in self)",
                          [Column("function", False, min_width=16), Column("self", True), Column("incl", True),
                           Column("traced", True), Column("instrs", True),
                           Column("defined", False, min_width=16, cut_start=True)], drop=(4, 3, 2))  # fmt: skip
        for f in result.functions[:top]:
            table.add_row(f.function, _secs(f.self_s), _secs(f.inclusive_s), f"{f.traced:,}", f"{f.instructions:,}",
                          _where(f.file, f.line))  # fmt: skip
        out.append(table)
    if result.lines:
        out.append("")
        table = fit_table("user lines, by Dynamo tracing time",
                          [Column("line", False, min_width=16, cut_start=True), Column("self", True),
                           Column("incl", True), Column("function", False, min_width=12),
                           Column("code", False, min_width=16)], drop=(4, 3, 2))  # fmt: skip
        for ln in result.lines[:top]:
            table.add_row(_where(ln.file, ln.line), _secs(ln.self_s), _secs(ln.inclusive_s), ln.function,
                          ln.code or "")  # fmt: skip
        out.append(table)
    if frames:
        out += ["", ("compiled frames (s): total = dynamo [tracing, of it thrown away by restarts, guards] "
                    "+ backend [AOTAutograd, inductor] (+ the backward graph's compile)")]  # fmt: skip
        for fr in sorted(frames, key=lambda x: -(x.total_s or 0.0))[:top]:
            cache = ", ".join(f"{k} {v}" for k, v in fr.cache.items())
            out.append(f"  {fr.compile_id:>6} {_t(fr.total_s)} = {_t(fr.dynamo_s)} [{_t(fr.tracing_s)}, "
                       f"{_t(fr.restart_s)}, {_t(fr.guards_s)}] + {_t(fr.backend_s)} [{_t(fr.aot_s)}, "
                       f"{_t(fr.inductor_s)}]" + (f" + backward {_t(fr.backward_s)}" if fr.backward_s else "")
                       + f"  {_frame_name(fr.function)} ({_where(fr.file, fr.line)})"
                       + (f" [{fr.status}]" if fr.status != "ok" else "") + (f"  cache: {cache}" if cache else ""))
    if result.graph_breaks:
        out += ["", ("graph breaks, by cost (s: compiling the code after the break as frames of its own, "
                    "plus the tracing Dynamo threw away restarting)")]  # fmt: skip
        for b in result.graph_breaks[:top]:
            out.append(f"  {b.cost_s:7.3f}  {_where(b.file, b.line)} in {b.function}: {b.reason}"
                       + (f"  x{b.count}" if b.count > 1 else ""))
            if b.code:
                out.append(f"           {b.code}")
    if result.recompiles:
        out += ["", "recompiles, by cost (s: the recompile's compile time), at the line that made the guard"]
        for r in result.recompiles[:top]:
            out.append(f"  {r.cost_s:7.3f}  {_where(r.file, r.line)} in {r.function}: {r.reason}"
                       f" (compile {r.compile_id})")
            if r.code:
                out.append(f"           {r.code}")
    for note in result.notes:
        out.append(f"note: {note}")
    if not frames and not result.functions:
        out.append("nothing was compiled (no torch.compile call ran)")
    return out
