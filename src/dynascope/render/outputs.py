"""From a run's files to its outputs: the summary of its traces with its explanation (and the eager run, and
every rank's explanation in a job), written as report.html and printed as the short summary. `dynascope run`
(one process, one rank, or the job's report) and `dynascope report` go through `load_run` and `summarize_run`.

`ns` below is the run command's options: `top`, `library_frames`, `no_html`. The explanation travels as
the typed Report of artifacts/explanation.py, from the observer (or the file) to the summary and the HTML.
"""

from __future__ import annotations

import glob
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dynascope.analyze.summary import Summary
from dynascope.artifacts.explanation import Report
from dynascope.artifacts.run_dir import (
    COMPILE_PROFILE_FILE,
    EAGER_DIR,
    EXPLANATION_FILE,
    REPORT_FILE,
    find_compile_profile,
    find_explanation,
    load_report,
)
from dynascope.console import say


@dataclass
class RunFiles:
    """What a run (or a job) left that a report reads, found and loaded once."""

    traces: list[Any]
    explanation: Report | None = None
    explanation_source: str | None = None  # where it came from (a path, or "ranks 0, 1")
    explanation_note: str | None = None  # why a file there is could not be read (then no explanation)
    found_beside: bool = False  # found beside the traces, not named: a job's gives way to every rank's
    library_frames: bool = False  # costs charged to the library's own lines (--library-frames)
    eager: list[Any] = field(default_factory=list)  # the eager comparison run's traces or directory
    compile_profile: Path | None = None


def eager_beside(traces: list[Any]) -> Path | None:
    """The eager/ directory a `dynascope run --compare-eager` wrote, under a directory given or beside a trace."""
    given = [Path(raw).resolve() for raw in traces]
    for raw in traces:
        p = Path(raw)
        for d in ([p] if p.is_dir() else []) + [p.parent]:
            eager = d / EAGER_DIR
            if any(g == eager.resolve() or eager.resolve() in g.parents for g in given):
                continue  # the eager run itself, given: it is not compared with itself
            if eager.is_dir() and any(eager.glob("*.pfw*")):
                return eager
    return None


def load_run(traces: list[Any], explanation: Path | None = None, eager: Path | None = None,
             compile_profile: Path | None = None, library_frames: bool = False) -> RunFiles:  # fmt: skip
    """The run's files: each one given, or found beside the traces."""
    source = explanation or find_explanation(traces)
    report, note = load_report(source) if source is not None else (None, None)
    found_eager = eager or eager_beside(traces)
    return RunFiles(
        traces=list(traces), explanation=report, explanation_source=os.fspath(source) if source else None,
        explanation_note=note, found_beside=explanation is None and report is not None,
        eager=[found_eager] if found_eager else [], compile_profile=compile_profile or find_compile_profile(traces),
        library_frames=library_frames,
    )  # fmt: skip


def summarize_run(run: RunFiles, top: int, **summarize: Any) -> Summary:
    """The run's summary, with its explanation; in a job, every rank's explanation is read and the HTML gets
    their merge (`run.explanation` and its source are replaced); with the eager run beside it, compared."""
    from dynascope.render._analysis import summarize_paths

    summary = summarize_paths(run.traces, top=top, explanation=run.explanation, explanation_beside=run.found_beside,
                              library_frames=run.library_frames, **summarize)  # fmt: skip
    if run.found_beside and len(summary.explanations) > 1:  # a job: every rank's explanation was read
        from dynascope.analyze.ranks import merged_explanation

        run.explanation = merged_explanation(summary.explanations)
        run.explanation_source = f"ranks {', '.join(str(r) for r in summary.explanations)}"
    if run.eager:
        from dynascope.analyze.payoff import with_eager

        summary = with_eager(summary, summarize_paths(run.eager, top=top))
    return summary


def write_run_outputs(out_dir: str, stem: str, script: str, observer: Any, error: Any, ns: Any,
                      profiler: Any = None) -> dict:
    """One process's outputs: its explanation (and compile profile) in out_dir, report.html and the short
    summary, from its traces; the paths written."""
    from dynascope.render.terminal import render_short

    written: dict[str, Any] = {"traces": sorted(glob.glob(os.path.join(out_dir, f"{stem}-*.pfw*")))}
    explanation = None
    report = None
    if observer is not None:
        from dynascope.render.explanation_files import write_explanation

        report = observer.report(script=script, error=error)
        write_explanation(report, out_dir)
        explanation = os.path.join(out_dir, EXPLANATION_FILE)
        written["explanation"] = explanation
    profile = None
    if profiler is not None and profiler.result is not None:
        from dynascope.artifacts.compile_profile import save_compile_profile

        profile = os.path.join(out_dir, COMPILE_PROFILE_FILE)
        save_compile_profile(profiler.result, profile)
        written["compile_profile"] = profile
    eager = sorted(glob.glob(os.path.join(out_dir, EAGER_DIR, f"{stem}-*.pfw*")))
    run = RunFiles(traces=written["traces"], explanation=report, explanation_source=explanation, eager=eager,
                   library_frames=ns.library_frames)  # fmt: skip
    summary = summarize_run(run, top=max(ns.top, 1))
    if report is not None and explanation:
        report = _explanation_with_wall_times(report, summary, explanation)
    if eager:
        written["eager"] = eager
    if not ns.no_html:
        from dynascope.render.html import write_html

        written["html"] = str(write_html(summary, os.path.join(out_dir, REPORT_FILE), report,
                                         title=f"dynascope run {os.path.basename(script)}",
                                         compile_profile=profile, explanation_path=explanation))  # fmt: skip
    print()
    render_short(summary, top=ns.top)
    print()
    for trace in written["traces"]:
        print(f"trace        {trace}")
    for trace in written.get("eager", []):
        print(f"eager run    {trace}")
    if explanation:
        print(f"explanation  {explanation}  (one .py per compiled function beside it)")
    if profile:
        print(f"compile      {profile}  (dynascope compile-profile prints the same)")
    if "html" in written:
        print(f"report       {written['html']}")
    traces = written["traces"]
    target = traces[0] if len(traces) == 1 else out_dir  # several processes (DataLoader workers): all of them
    print(f"next         dynascope report {target}   ·   "
          f"dynascope convert ... -o trace.json (for Perfetto)")  # fmt: skip
    return written


def _explanation_with_wall_times(report: Report, summary: Summary, path: str) -> Report:
    """The explanation with each compile's time as the trace measured it (the report's compile_vs_run
    figures, torch's own kept as timers_s), written over the run's explanation.json: every reader of the file
    (`dynascope explain DIR`, a user's script) and the HTML made from the returned one then show the same
    figures as the report."""
    from dynascope.artifacts.explanation import apply_wall_times
    from dynascope.render.html_views import compile_wall_us

    wall = compile_wall_us(summary)
    if not wall:
        return report
    timed = apply_wall_times(report, wall)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(timed.to_json())
        fh.write("\n")
    return timed


def write_rank_outputs(out_dir: str, stem: str, rank: Any, script: str, observer: Any, error: Any,
                       ns: Any, profiler: Any = None) -> None:  # fmt: skip
    """One rank's files: its explanation (and compile profile) in OUT/rank<R>/; then its marker, and the
    job report if this rank is the last to finish (or one short line: the outer dynascope run, or the
    last rank, writes the report)."""
    from dynascope import launch as _launch
    from dynascope.render._analysis import summarize_paths

    own_dir = _launch.rank_dir(out_dir, rank)
    os.makedirs(own_dir, exist_ok=True)
    traces = sorted(glob.glob(os.path.join(glob.escape(out_dir), f"{glob.escape(stem)}-*.pfw*")))
    explanation = None
    if observer is not None:
        from dynascope.render.explanation_files import write_explanation

        report = observer.report(script=script, error=error)
        write_explanation(report, own_dir)
        explanation = os.path.join(own_dir, EXPLANATION_FILE)
        try:
            summary = summarize_paths(list[Any](traces), top=max(ns.top, 1), explanation=report)
            _explanation_with_wall_times(report, summary, explanation)
        except Exception as exc:  # noqa: BLE001 - the explanation keeps torch's own compile times
            say("run", f"note: rank {rank.rank}: compile times from torch's timers ({type(exc).__name__}: {exc})")
    if profiler is not None and profiler.result is not None:
        from dynascope.artifacts.compile_profile import save_compile_profile

        save_compile_profile(profiler.result, os.path.join(own_dir, COMPILE_PROFILE_FILE))
    outer = os.environ.get(_launch.OUTER_VAR)
    last = _launch.mark_done(out_dir, rank, {"traces": traces, "explanation": explanation, "pid": os.getpid(),
                                             "failed": error is not None})  # fmt: skip
    if last and not outer:
        base = stem[: stem.rfind("-rank")]
        write_job_report(out_dir, base, os.path.basename(script), ns)
        return
    then = "the job report follows when the launcher is done" if outer else (
        "the job report comes from the last rank to finish")
    print(f"dynascope run: rank {rank.rank}: trace {', '.join(traces) or '(none)'}; {then}", file=sys.stderr)


def write_job_report(out_dir: str, stem: str, script_name: str, ns: Any) -> None:
    """The report of every rank's traces in out_dir: report.html and the terminal summary, once per job."""
    from dynascope import launch as _launch
    from dynascope.render.terminal import render_short

    traces: list[Any] = _launch.rank_traces(out_dir, stem)
    if not traces:
        say("run", f"note: no rank's trace in {out_dir}; no job report")
        return
    explanations = sorted(glob.glob(os.path.join(glob.escape(out_dir), "rank*", EXPLANATION_FILE)),
                          key=lambda p: int(re.sub(r"\D", "", os.path.basename(os.path.dirname(p))) or 0))  # fmt: skip
    report, note = load_report(explanations[0]) if explanations else (None, None)
    eager_glob = os.path.join(glob.escape(out_dir), EAGER_DIR, f"{glob.escape(stem)}-rank*-*.pfw*")
    run = RunFiles(traces=traces, explanation=report, explanation_source=explanations[0] if explanations else None,
                   explanation_note=note, found_beside=True, eager=sorted(glob.glob(eager_glob)),
                   library_frames=ns.library_frames)  # fmt: skip
    summary = summarize_run(run, top=max(ns.top, 1))
    html = None
    if not ns.no_html:
        from dynascope.render.html import write_html

        ranks = len({re.sub(r"-\d+\.pfw(\.gz)?$", "", os.path.basename(t)) for t in traces})
        html = write_html(summary, os.path.join(out_dir, REPORT_FILE), run.explanation,
                          title=f"dynascope run {script_name} ({ranks} ranks)",
                          explanation_path=explanations[0] if explanations else None)  # fmt: skip
    print()
    render_short(summary, top=ns.top)
    print()
    for i, trace in enumerate(traces):
        if i == 8 and len(traces) > 9:
            print(f"trace        ... and {len(traces) - 8} more in {out_dir}")
            break
        print(f"trace        {trace}")
    if explanations:
        shown = explanations[0] if len(explanations) == 1 else os.path.join(out_dir, "rank*", EXPLANATION_FILE)
        print(f"explanation  {shown}  ({len(explanations)} rank(s); one .py per compiled function beside each)")
    if html is not None:
        print(f"report       {html}")
    print(f"next         dynascope report {out_dir}   ·   dynascope convert ... -o trace.json (for Perfetto)")


