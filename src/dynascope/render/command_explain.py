"""`dynascope explain`: run a script and explain what Dynamo did (explain/command.py), or, given a run's
output directory or its explanation.json, print that saved explanation again, with what each graph break
and recompile cost at run time when the run's trace is beside it (`dynascope run` writes both).

    dynascope explain train.py            # run it, observe every compile, explain
    dynascope explain dynascope-out       # the saved explanation, costed from the trace beside it
    dynascope explain job-out             # a job of many ranks: each rank's (job-out/rank<R>/), in rank order
    dynascope explain job-out/rank1       # one rank's, costed from that rank's traces in job-out
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from dynascope.analyze.pipeline import EXPLANATION_FILE
from dynascope.artifacts.explanation import Report
from dynascope.errors import ConfigError
from dynascope.explain import command as run_and_explain

_RANK_DIR = re.compile(r"rank(\d+)")


def _rank_dirs(path: Path) -> list[Path]:
    """A job's output directory: its ranks' folders that hold an explanation, in rank order."""
    found = [(int(m.group(1)), d) for d in path.iterdir()
             if d.is_dir() and (m := _RANK_DIR.fullmatch(d.name)) and (d / EXPLANATION_FILE).is_file()]  # fmt: skip
    return [d for _, d in sorted(found)]


def _saved(argv: list[str]) -> list[Path] | None:
    """The explanation.json files the arguments name (a file, a directory holding one, or a job's directory
    holding one per rank), or None: a script."""
    target = run_and_explain.script_of(argv)
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
        return run_and_explain.main(argv)
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
    from dynascope.render.html import compile_wall_us, load_explanation

    data = load_explanation(saved)
    if "schema" not in data and "explanations" not in data:
        raise ConfigError(f"{saved} is not an explanation (written by `dynascope explain --out` or `dynascope run`)")
    report = Report.from_dict(data)
    summary = _summary_beside(saved.parent, data)
    costs = _costs_by_compile_id(summary) if summary is not None else None
    run_and_explain.print_report(report, costs, compile_wall_us(summary) if summary is not None else None)
    if summary is not None:
        from dynascope.console import make_console
        from dynascope.render.terminal import render_costs

        render_costs(summary, make_console())
    else:
        print(f"\n(no trace beside {saved}: `dynascope run` writes one, and then the run-time cost of each graph "
              "break is shown here)", file=sys.stderr)  # fmt: skip
    return 0


def _summary_beside(directory: Path, explanation: dict):
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
