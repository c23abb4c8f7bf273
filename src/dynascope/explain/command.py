"""`dynascope explain script.py [args] [--out DIR]`: run a script under compile observation and
explain every function torch.compile touched.

Our options go before the script path, or after it as `--out DIR` / `--out=DIR`; put `--` after the
script to pass everything that follows (an `--out` included) to the script untouched.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import sys

from dynascope.artifacts.explanation import CacheEntry, Explanation, Report
from dynascope.console import make_console, print_lines, print_rule, say, script_exit_status
from dynascope.errors import ConfigError
from dynascope.render.explanation_text import explanation_lines, observation_lines, render_guards, render_observations
from dynascope.scriptrun import trailing_options

TERMINAL_GUARD_LIMIT = 40  # checks shown per variable on the terminal; --out files have all of them
USAGE = "dynascope explain [--out DIR] [--quiet] script.py [script args] [--out DIR]  |  dynascope explain RUN_DIR"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dynascope explain", usage=USAGE,
        description="Run a script, observe every torch.compile in it, and explain what Dynamo did to each "
                    "compiled function: cache entries, guards, transformed code, subgraphs, resume functions, "
                    "graph breaks, recompiles and compile times. Given a run's output directory (or its "
                    "explanation.json) instead, print that saved explanation, with what each graph break and "
                    "recompile cost when the run's trace is beside it.",
    )
    p.add_argument("--out", metavar="DIR", help="also write one .py file per function and DIR/explanation.json")
    p.add_argument("--quiet", action="store_true", help="do not print the report (use with --out)")
    p.add_argument("script", help="the Python script to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    return p


def script_of(argv: list[str]) -> str | None:
    """The script (or run directory) `argv` names, its options skipped; None where it names none."""
    if {"-h", "--help"} & set(argv):
        return None
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            ns, _ = _parser().parse_known_args(argv)
    except SystemExit:  # no script: main() says so in one line
        return None
    return ns.script


def _split_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    if script_of(argv) is None and not {"-h", "--help"} & set(argv):
        raise ConfigError(f"give the script to run: {USAGE}")
    ns = _parser().parse_args(argv)
    values, script_args = trailing_options(list(ns.args), ("--out",), USAGE)
    ns.out = values.get("--out", ns.out)
    return ns, script_args


def main(argv: list[str]) -> int:
    ns, script_args = _split_args(argv)
    from dynascope.explain.observer import Observer
    from dynascope.scriptrun import check_script, run_script

    script = check_script(ns.script)
    out_dir = None
    if ns.out:
        out_dir = os.path.abspath(ns.out)
        from dynascope.launch import rank_dir, this_rank

        rank = this_rank()
        if rank is not None:  # one explanation per rank: DIR/rank<R>/ (README "Many ranks")
            out_dir = rank_dir(out_dir, rank)
        try:
            os.makedirs(out_dir, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create --out directory {ns.out}: {exc.strerror or exc}") from exc

    obs = Observer().start()
    try:
        error = run_script(script, script_args)
    finally:
        obs.stop()
    sys.stdout.flush()
    report = obs.report(script=script, error=error)

    if not ns.quiet:
        print_report(report)
    if out_dir is not None:
        written = write_outputs(report, out_dir)
        print(file=sys.stderr)
        say("explain", f"wrote {len(written)} files to {out_dir} (explanation.json and one .py per function)")

    return script_exit_status("explain", script, error)


# ------------------------------------------------------------------------------------------------
# Terminal
# ------------------------------------------------------------------------------------------------


def print_report(report: Report, costs: dict[str, str] | None = None, wall_us: dict[str, int] | None = None) -> None:
    """The report on the terminal; `costs`: each graph break's run-time cost by compile id, `wall_us`: each
    compile id's compile time (see observation_lines), where a trace of the same run is at hand."""
    console = make_console(soft_wrap=True)
    if not report.explanations:
        console.print("No function was compiled by torch.compile (or every cache entry was cleared).", markup=False)
    for expl in report.explanations:
        fn = expl.function
        print_rule(console, f"{fn.qualname or fn.name}  ({fn.where()})")
        print_lines(console, explanation_lines(_without_records(expl), guard_limit=TERMINAL_GUARD_LIMIT).rows)
        console.print()
    obs = observation_lines(report, costs, wall_us)
    if obs:
        print_rule(console, "What happened while the script ran")
        print_lines(console, obs.rows)


def _without_records(expl: Explanation) -> Explanation:
    """The per-function text without the observations (printed once for the whole run)."""
    return Explanation(function=expl.function, source=expl.source, kind=expl.kind,
                       cache_entries=expl.cache_entries, notes=expl.notes)


# ------------------------------------------------------------------------------------------------
# --out DIR
# ------------------------------------------------------------------------------------------------


def write_outputs(report: Report, out_dir: str) -> list[str]:
    written = []
    used: set[str] = set()
    for expl in report.explanations:
        base = re.sub(r"[^A-Za-z0-9_]+", "_", expl.function.qualname or expl.function.name).strip("_") or "function"
        name, n = base, 1
        while name in used:
            n += 1
            name = f"{base}_{n}"
        used.add(name)
        path = os.path.join(out_dir, f"{name}.py")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(function_file(expl, report.torch_version))
        written.append(path)
    path = os.path.join(out_dir, "explanation.json")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(report.to_json())
        fh.write("\n")
    written.append(path)
    return written


def _comment(text: str, prefix: str = "# ") -> str:
    return "\n".join((prefix + line).rstrip() for line in text.splitlines())


def function_file(expl: Explanation, torch_version: str | None) -> str:
    fn = expl.function
    out: list[str] = [
        f'"""What Dynamo did to {fn.qualname or fn.name} ({fn.where()}), torch {torch_version or "?"}.',
        "",
        "Written by `dynascope explain`. Cache entries are listed in the order Dynamo checks them; each",
        "runs only when all its guards pass. Code Dynamo generated is shown as Python where it could be",
        'decompiled; everything else (guards, original source, bytecode) is in comments."""',
        "",
        "import torch  # noqa: F401  (the subgraphs below refer to it)",
        "",
    ]
    if expl.source:
        out += ["# ---- original source ----", _comment(expl.source), ""]
    _entries_py(expl, out, prefix="", user_file=fn.file)
    if expl.graph_breaks or expl.recompiles or expl.compile_times:
        out += ["", "# ---- what happened ----", _comment(render_observations(expl))]
    return "\n".join(out).rstrip() + "\n"


def _entries_py(expl: Explanation, out: list[str], prefix: str, user_file: str | None) -> None:
    for entry in expl.cache_entries:
        _entry_py(entry, out, prefix, user_file)


def _entry_py(entry: CacheEntry, out: list[str], prefix: str, user_file: str | None) -> None:
    tag = f"{prefix}cache entry {entry.index}"
    out += [
        f"# ==== {tag}: compile id {entry.compile_id}, backend {entry.backend or '?'} ====",
        f"# guards ({entry.guard_count} checks; this entry runs only if all pass):",
        _comment(render_guards(entry, user_file), "#   "),
        "# torch's own guard text:",
    ]
    for group in entry.guards:
        for g in group.guards:
            out.append(_comment(g.raw, "#   "))
    out.append("")
    if entry.code is not None:
        out.append(f"# transformed code ({'decompiled' if entry.code.decompiled else 'bytecode'}):")
        out.append(entry.code.source if entry.code.decompiled else _comment(entry.code.source))
        out.append("")
    for sg in entry.subgraphs:
        ops = f", {sg.op_count} ops" if sg.op_count is not None else ""
        out.append(f"# subgraph {sg.name} ({sg.global_name}{ops}):")
        if sg.fx_code:
            code = sg.fx_code.replace("class GraphModule(torch.nn.Module):", f"class {sg.name}(torch.nn.Module):", 1)
            out.append(code if _parses(code) else _comment(code))
        else:
            out.append("# (FX code not available)")
        out.append("")
    for rf in entry.resume_functions:
        out.append(f"# resume function {rf.name} ({rf.code_name}), resumes at line {rf.line}:")
        if rf.source:
            out.append(_comment(rf.source))
        if rf.explanation is not None:
            _entries_py(rf.explanation, out, prefix=f"{prefix}{rf.name} ", user_file=user_file)
        else:
            out.append("#   (no cache entries: this path has not run)")
        out.append("")


def _parses(code: str) -> bool:
    try:
        compile(code, "<fx>", "exec")
    except SyntaxError:
        return False
    return True


