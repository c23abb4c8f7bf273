"""`dynascope explain`: run a script and explain what Dynamo did (explain/command.py), or, given a run's
output directory or its explanation.json, print that saved explanation again, with what each graph break
and recompile cost at run time when the run's trace is beside it (`dynascope run` writes both).

    dynascope explain train.py            # run it, observe every compile, explain
    dynascope explain dynascope-out       # the saved explanation, costed from the trace beside it
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..analyze.summarize import EXPLANATION_FILE
from ..errors import ConfigError
from ..explain import command as run_and_explain
from ..explain.model import Report


def _saved(argv: list[str]) -> Path | None:
    """The explanation.json the arguments name (a file, or a directory holding one), or None: a script."""
    target = run_and_explain.script_of(argv)
    if target is None:
        return None
    path = Path(target)
    if path.is_dir() and (path / EXPLANATION_FILE).is_file():
        return path / EXPLANATION_FILE
    if path.is_dir() and not (path / "__main__.py").is_file():
        raise ConfigError(f"{path} holds no {EXPLANATION_FILE} (what `dynascope run` or `dynascope explain --out` "
                          "writes) and is no runnable package: give a script, or a run's output directory")
    if path.is_file() and path.suffix == ".json":
        return path
    return None


def main(argv: list[str]) -> int:
    saved = _saved(argv)
    if saved is None:
        return run_and_explain.main(argv)
    from .html import compile_wall_us, load_explanation

    data = load_explanation(saved)
    if "schema" not in data and "explanations" not in data:
        raise ConfigError(f"{saved} is not an explanation (written by `dynascope explain --out` or `dynascope run`)")
    report = Report.from_dict(data)
    summary = _summary_beside(saved.parent, data)
    costs = _costs_by_compile_id(summary) if summary is not None else None
    run_and_explain.print_report(report, costs, compile_wall_us(summary) if summary is not None else None)
    if summary is not None:
        from ..console import make_console
        from .terminal import render_costs

        render_costs(summary, make_console())
    else:
        print(f"\n(no trace beside {saved}: `dynascope run` writes one, and then the run-time cost of each graph "
              "break is shown here)", file=sys.stderr)  # fmt: skip
    return 0


def _summary_beside(directory: Path, explanation: dict):
    from ..analyze.paths import is_trace_file
    from ._analysis import summarize_paths

    if not any(is_trace_file(p) for p in directory.iterdir() if p.is_file()):
        return None
    return summarize_paths([os.fspath(directory)], explanation=explanation)


def _costs_by_compile_id(summary) -> dict[str, str]:
    from ._fmt import fmt_share, fmt_us

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
