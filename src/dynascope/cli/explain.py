"""`dynascope explain`: run a script and explain what Dynamo did, or, given a run's
output directory or its explanation.json, print that saved explanation again, with what each graph break
and recompile cost at run time when the run's trace is beside it (`dynascope run` writes both).

    dynascope explain train.py            # run it, observe every compile, explain
    dynascope explain dynascope-out       # the saved explanation, costed from the trace beside it
    dynascope explain job-out             # a job of many ranks: each rank's (job-out/rank<R>/), in rank order
    dynascope explain job-out/rank1       # one rank's, costed from that rank's traces in job-out

Our options go before the script; everything after it is the script's (cli/_script_line.py).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from dynascope.artifacts.explanation import Report
from dynascope.artifacts.run_dir import EXPLANATION_FILE
from dynascope.cli._script_line import parse_script_line, split_script_line
from dynascope.console import say, script_exit_status
from dynascope.errors import ConfigError
from dynascope.render.explanation_files import write_explanation
from dynascope.render.explanation_text import print_report

USAGE = "dynascope explain [--out DIR] [--quiet] script.py [script args]  |  dynascope explain RUN_DIR"


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
    return split_script_line(_parser(), argv)[1]


def _split_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    ns = parse_script_line(_parser(), argv)
    return ns, ns.args


def _run_and_explain(argv: list[str]) -> int:
    ns, script_args = _split_args(argv)
    from dynascope.explain.observer import Observer
    from dynascope.scriptrun import check_script, run_script

    script = check_script(ns.script)
    out_dir = None
    if ns.out:
        out_dir = os.path.abspath(ns.out)
        from dynascope.launch import rank_dir, this_rank

        rank = this_rank()
        if rank is not None:  # one explanation per rank: DIR/rank<R>/ (docs/ranks.md, "Launching")
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
        written = write_explanation(report, out_dir)
        print(file=sys.stderr)
        say("explain", f"wrote {len(written)} files to {out_dir} (explanation.json and one .py per function)")

    return script_exit_status("explain", script, error)



_RANK_DIR = re.compile(r"rank(\d+)")


def _rank_dirs(path: Path) -> list[Path]:
    """A job's output directory: its ranks' folders that hold an explanation, in rank order."""
    found = [(int(m.group(1)), d) for d in path.iterdir()
             if d.is_dir() and (m := _RANK_DIR.fullmatch(d.name)) and (d / EXPLANATION_FILE).is_file()]  # fmt: skip
    return [d for _, d in sorted(found)]


def _saved(argv: list[str]) -> list[Path] | None:
    """The explanation.json files the arguments name (a file, a directory holding one, or a job's directory
    holding one per rank), or None: a script."""
    target = script_of(argv)
    if target is None:
        return None
    path = Path(target)
    if path.is_dir() and (path / EXPLANATION_FILE).is_file():
        return [path / EXPLANATION_FILE]
    if path.is_dir() and (ranks := _rank_dirs(path)):
        return [d / EXPLANATION_FILE for d in ranks]
    if path.is_dir() and not (path / "__main__.py").is_file():
        raise ConfigError(f"{path} holds no {EXPLANATION_FILE} (what `dynascope run` or `dynascope explain --out` "
                          "writes) and is no runnable package: give a script, or a run's output directory")
    if path.is_file() and path.suffix == ".json":
        return [path]
    return None


def main(argv: list[str]) -> int:
    saved = _saved(argv)
    if saved is None:
        return _run_and_explain(argv)
    if len(saved) == 1:
        return _explain_saved(saved[0])
    print(f"{len(saved)} ranks, each rank's explanation in turn (`dynascope report {saved[0].parent.parent}` "
          "compares them: where the ranks diverge, steps and collectives)")  # fmt: skip
    for path in saved:
        print(f"\n{'=' * 20} {path.parent.name} {'=' * 20}")
        sys.stdout.flush()
        _explain_saved(path)
    return 0


def _explain_saved(saved: Path) -> int:
    from dynascope.artifacts.run_dir import load_explanation
    from dynascope.render.html_views import compile_wall_us

    data = load_explanation(saved)
    if "schema" not in data and "explanations" not in data:
        raise ConfigError(f"{saved} is not an explanation (written by `dynascope explain --out` or `dynascope run`)")
    report = Report.from_dict(data)
    summary = _summary_beside(saved.parent, report)
    costs = _costs_by_compile_id(summary) if summary is not None else None
    print_report(report, costs, compile_wall_us(summary) if summary is not None else None)
    if summary is not None:
        from dynascope.console import make_console
        from dynascope.render.terminal import render_costs

        render_costs(summary, make_console())
    else:
        print(f"\n(no trace beside {saved}: `dynascope run` writes one, and then the run-time cost of each graph "
              "break is shown here)", file=sys.stderr)  # fmt: skip
    return 0


def _summary_beside(directory: Path, explanation: Report):
    """The run's summary from the traces beside the explanation; for a rank's folder of a job
    (OUT/rank<R>/), from that rank's traces in OUT (`<stem>-rank<R>-<pid>.pfw.gz`)."""
    from dynascope.analyze.read.paths import is_trace_file
    from dynascope.render._analysis import summarize_paths

    traces = [p for p in directory.iterdir() if p.is_file() and is_trace_file(p)]
    if not traces and _RANK_DIR.fullmatch(directory.name):
        mine = re.compile(rf".+-{directory.name}-\d+\.pfw(\.gz)?")
        traces = [p for p in directory.parent.iterdir() if p.is_file() and mine.fullmatch(p.name)]
    if not traces:
        return None
    if traces[0].parent == directory:
        return summarize_paths([os.fspath(directory)], explanation=explanation)
    return summarize_paths([os.fspath(p) for p in sorted(traces)], explanation=explanation)


def _costs_by_compile_id(summary) -> dict[str, str]:
    from dynascope.render._fmt import fmt_share, fmt_us

    out: dict[str, str] = {}
    for r in summary.graph_breaks.iter_rows(named=True):
        if not r.get("calls"):
            text = r.get("note") or "not hit while traced"
        elif not r.get("measurable"):
            text = f"nothing measurable ({r['calls']} hits)"
        else:
            text = (f"{fmt_us(r['per_call_us'])} per call ({fmt_share(r['share'])} of it), hit {r['calls']:,} times, "
                    f"{fmt_us(r['total_us'])} in all (fix: below)")  # fmt: skip
        for cid in r.get("compile_ids") or []:
            out.setdefault(cid, text)
    return out
