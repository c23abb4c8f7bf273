"""`dynascope run script.py [args]`: trace and explain every torch.compile in an unmodified script.

While the script runs, `torch.compile` hands out tracing backends, Dynamo's compiles are observed,
and one trace session records everything. At exit DIR holds the trace, explanation.json with one
.py file per compiled function, and report.html; the terminal gets a short summary and the paths.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import glob
import os
import re
import sys
from collections.abc import Iterator
from typing import Any

from dynascope.analyze.read.paths import EAGER_DIR
from dynascope.console import say, script_exit_status
from dynascope.errors import ConfigError

BACKEND_CHOICES = ("auto", "aot_eager", "eager", "inductor")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dynascope run",
        description="Run a script with every torch.compile traced at op level and explained.",
    )
    parser.add_argument("--out", default="dynascope-out", help="output directory (default: ./dynascope-out)")
    parser.add_argument(
        "--backend", choices=BACKEND_CHOICES, default="auto",
        help="inner backend: auto keeps what the script asked for (inductor: each generated kernel, extern "
             "call and fallback; eager, aot_eager: each op); aot_eager traces the same graphs as ATen ops",
    )  # fmt: skip
    parser.add_argument("--shapes", action="store_true", help="record input shapes and dtypes of every op")
    parser.add_argument("--no-io", action="store_true",
                        help="do not trace file I/O (open/read/write/close, torch.save/load); as DFTRACER_DISABLE_IO=1")
    parser.add_argument("--no-step-events", action="store_true",
                        help="do not record DataLoader batches, backward, optimizer steps and torch.save/load")
    parser.add_argument(
        "--no-explain", action="store_true", help="do not observe compilation or write explanation.json"
    )
    parser.add_argument("--no-html", action="store_true", help="do not write report.html")
    parser.add_argument("--no-recompiles", action="store_true",
                        help="stop at the first recompilation: which guard failed, and the line behind it")  # fmt: skip
    parser.add_argument(
        "--compile-profile", action="store_true",
        help="also profile compile time per frame, phase, user function and line: DIR/compile_profile.json",
    )  # fmt: skip
    parser.add_argument(
        "--compare-eager", action="store_true",
        help="then run the script again with every compiled function run eagerly (torch.compiler.set_stance"
             "('force_eager')), traced into DIR/eager/, and compare: speedup per compiled function and per step, and "
             "after how many calls compiling is repaid",
    )  # fmt: skip
    parser.add_argument("--top", type=int, default=8, help="ops in the printed summary (default 8)")
    parser.add_argument(
        "--library-frames", action="store_true",
        help="charge graph breaks and recompiles to the library line torch names (torch.nn's, an installed "
             "package's), not to the first line of your own code that led there",
    )  # fmt: skip
    parser.add_argument("script", help="the Python script to run (or -m MODULE; or a launcher: torchrun ARGS, "
                                       "python -m torch.distributed.run ARGS: each rank traced)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    return parser


def _substitute(requested: Any, choice: str, record_shapes: bool, notes: list[str]) -> Any:
    """The backend to give torch.compile instead of `requested`."""
    from dynascope.capture.backend import TracingBackend

    if isinstance(requested, TracingBackend):
        return requested
    name = requested if isinstance(requested, str) else getattr(requested, "compiler_name", None)
    if choice == "inductor":
        return TracingBackend(inner="inductor", record_shapes=record_shapes)
    if choice == "eager" or (choice == "auto" and name == "eager"):
        return TracingBackend(autograd=False, record_shapes=record_shapes)
    if choice == "aot_eager" or (choice == "auto" and name == "aot_eager"):
        return TracingBackend(autograd=True, record_shapes=record_shapes)
    if name in (None, "inductor"):  # what the script runs: inductor's kernels (--backend aot_eager: ATen ops)
        return TracingBackend(inner="inductor", record_shapes=record_shapes)
    _note_once(
        notes, f"backend {name!r} is not traced (dynascope traces eager, aot_eager and inductor); it runs as asked"
    )
    return requested


def _note_once(notes: list[str], text: str) -> None:
    if text not in notes:
        notes.append(text)
        say("run", f"note: {text}")


@contextlib.contextmanager
def tracing_compiles(choice: str, record_shapes: bool, notes: list[str]) -> Iterator[None]:
    """Make every torch.compile call in the block use a tracing backend."""
    import torch

    original = torch.compile

    @functools.wraps(original)
    def traced_compile(model: Any = None, *args: Any, backend: Any = "inductor", mode: Any = None,
                       options: Any = None, **kwargs: Any) -> Any:  # fmt: skip
        chosen = _substitute(backend, choice, record_shapes, notes)
        # mode/options reach the tracing backend, which hands them to inductor (or says once they do not apply)
        return original(model, *args, backend=chosen, mode=mode, options=options, **kwargs)

    torch.compile = traced_compile
    try:
        yield
    finally:
        torch.compile = original


def _recompile_guard(on: bool) -> Any:
    """--no-recompiles: Dynamo refuses the script's first recompilation (the error becomes a
    RecompileError with the facts once run_script hands it back)."""
    if not on:
        return contextlib.nullcontext()
    from dynascope import _torch

    return _torch.recompile_refusal()


def _stale_traces(out_dir: str, stem: str) -> None:
    for path in glob.glob(os.path.join(out_dir, f"{stem}-*.pfw*")):
        os.remove(path)


def _parse(argv: list[str]) -> tuple[argparse.Namespace, str | None]:
    """Our options and the script, or `-m MODULE` in its place (everything after it is the module's)."""
    parser = _parser()
    if "-m" in argv:
        at = argv.index("-m")
        if at + 1 < len(argv):
            head = parser.parse_args([*argv[:at], "-"])
            if head.script == "-" and not head.args:  # -m is ours, not an argument of a script before it
                head.script, head.args = argv[at + 1], argv[at + 2 :]
                return head, argv[at + 1]
    return parser.parse_args(argv), None


def main(argv: list[str]) -> int:
    argv = list(argv)
    ns, module = _parse(argv)
    from dynascope import _torch
    from dynascope import launch as _launch
    from dynascope.scriptrun import check_module, check_script, run_module, run_script
    from dynascope.trace.config import TraceConfig
    from dynascope.trace.session import TraceSession

    _torch.require_torch()
    launcher = None if module else _launch.launcher_args(ns.script, ns.args)
    if launcher is not None:
        return _run_launcher(argv, ns, launcher)
    script = check_module(module) if module else check_script(ns.script)
    out_dir = os.path.abspath(ns.out)
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the output directory {ns.out}: {exc.strerror or exc}") from None
    stem = (module.rsplit(".", 1)[-1] if module else os.path.splitext(os.path.basename(script))[0]) or "trace"
    rank = _launch.this_rank()
    if rank is None:
        _stale_traces(out_dir, stem)
    else:
        _launch.remove_stale(out_dir, stem, rank)
    stem = _launch.rank_stem(stem, rank)  # a rank's files: <script>-rank<R>-<pid>.pfw.gz
    stale_profile = os.path.join(out_dir, "compile_profile.json")
    if not ns.compile_profile and os.path.isfile(stale_profile):  # report --html would show an old one
        os.remove(stale_profile)
    if module:
        run_script = functools.partial(_run_module_as_script, module, run_module)
    config = TraceConfig.from_env(  # None: the environment decides
        record_shapes=ns.shapes or None, disable_io=ns.no_io or None, step_events=False if ns.no_step_events else None
    )
    session = TraceSession(os.path.join(out_dir, stem + ".pfw.gz"), config=config)
    session.open()
    observer = None
    if not ns.no_explain:
        from dynascope.explain.observer import Observer

        observer = Observer().start()
    profiler = None
    if ns.compile_profile:
        from dynascope.debug.compile_profile import CompileProfiler

        profiler = CompileProfiler(script=script).start()
    notes: list[str] = []
    error: BaseException | None = None
    try:
        with tracing_compiles(ns.backend, ns.shapes, notes), _recompile_guard(ns.no_recompiles):
            error = run_script(script, ns.args)
        if error is not None and ns.no_recompiles:
            from dynascope.debug.recompiles import as_recompile_error

            error = as_recompile_error(error)
    finally:
        if profiler is not None:
            profiler.stop(error)
        if observer is not None:
            observer.stop()
        session.finalize()
    eager_dir = os.path.join(out_dir, EAGER_DIR)
    if os.path.isdir(eager_dir):
        _stale_traces(eager_dir, stem)
    if ns.compare_eager and error is None:
        _eager_pass(script, ns.args, os.path.join(eager_dir, stem + ".pfw.gz"), config, run_script)
    elif ns.compare_eager:
        say("run", "note: --compare-eager skipped: the script did not finish, so there is nothing to compare")
    sys.stdout.flush()
    if rank is None:
        _write_outputs(out_dir, stem, script, observer, error, ns, profiler)
    else:
        _rank_outputs(out_dir, stem, rank, script, observer, error, ns, profiler)
    return script_exit_status("run", script, error)


def _run_module_as_script(module: str, run_module: Any, _script: str, args: list[str]) -> BaseException | None:
    return run_module(module, args)


def _eager_pass(script: str, args: list[str], trace: str, config: Any, run: Any = None) -> None:
    """Run the script again with every torch.compile'd function run eagerly, traced into `trace`; what it
    times (each compiled function's calls, the steps) is what the comparison needs."""
    from dynascope import _torch
    from dynascope.scriptrun import run_script
    from dynascope.trace.session import TraceSession

    run_script = run or run_script
    sys.stdout.flush()
    say("run", "--compare-eager: running the script again, every compiled function eagerly")
    session = TraceSession(trace, config=config)
    session.open()
    try:
        with _torch.force_eager():
            error = run_script(script, args)
    finally:
        session.finalize()
    if error is not None:
        say("run", f"note: the eager run raised {type(error).__name__}: {error}; its numbers cover what ran")


def _write_outputs(out_dir: str, stem: str, script: str, observer: Any, error: Any, ns: argparse.Namespace,
                   profiler: Any = None) -> dict:
    from dynascope.render._analysis import summarize_paths
    from dynascope.render.terminal import render_short

    written: dict[str, Any] = {"traces": sorted(glob.glob(os.path.join(out_dir, f"{stem}-*.pfw*")))}
    explanation = None
    if observer is not None:
        from dynascope.explain.command import write_outputs

        report = observer.report(script=script, error=error)
        write_outputs(report, out_dir)
        explanation = os.path.join(out_dir, "explanation.json")
        written["explanation"] = explanation
    profile = None
    if profiler is not None and profiler.result is not None:
        from dynascope.cli.compile_profile import write_json
        from dynascope.render.html import COMPILE_PROFILE_FILE

        profile = os.path.join(out_dir, COMPILE_PROFILE_FILE)
        write_json(profiler.result, profile)
        written["compile_profile"] = profile
    from dynascope.render.html import load_explanation

    explained = load_explanation(explanation) if explanation else None
    if explained is not None and ns.library_frames:
        explained["library_frames"] = True
    summary = summarize_paths(written["traces"], top=max(ns.top, 1), explanation=explained)
    if explanation:
        _explanation_with_wall_times(report, summary, explanation)
    eager = sorted(glob.glob(os.path.join(out_dir, EAGER_DIR, f"{stem}-*.pfw*")))
    if eager:
        from dynascope.analyze.payoff import with_eager

        summary = with_eager(summary, summarize_paths(list(eager), top=max(ns.top, 1)))
        written["eager"] = eager
    if not ns.no_html:
        from dynascope.render.html import write_html

        written["html"] = str(write_html(summary, os.path.join(out_dir, "report.html"), explanation,
                                         title=f"dynascope run {os.path.basename(script)}",
                                         compile_profile=profile))  # fmt: skip
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


def _explanation_with_wall_times(report: Any, summary: Any, path: str) -> None:
    """Rewrite the run's explanation.json with each compile's time as the trace measured it (the report's
    compile_vs_run figures, torch's own kept as timers_s): every reader of the file (`dynascope explain DIR`,
    the HTML, a user's script) then shows the same figures as the report."""
    from dynascope.artifacts.explanation import apply_wall_times
    from dynascope.render.html import compile_wall_us

    wall = compile_wall_us(summary)
    if not wall:
        return
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(apply_wall_times(report, wall).to_json())
        fh.write("\n")


# -- many ranks (launch.py; README "Many ranks") --------------------------------------------------------


def _rank_outputs(out_dir: str, stem: str, rank: Any, script: str, observer: Any, error: Any,
                  ns: argparse.Namespace, profiler: Any = None) -> None:  # fmt: skip
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
        from dynascope.explain.command import write_outputs
        from dynascope.render.html import load_explanation

        report = observer.report(script=script, error=error)
        write_outputs(report, own_dir)
        explanation = os.path.join(own_dir, "explanation.json")
        try:
            summary = summarize_paths(list[Any](traces), top=max(ns.top, 1), explanation=load_explanation(explanation))
            _explanation_with_wall_times(report, summary, explanation)
        except Exception as exc:  # noqa: BLE001 - the explanation keeps torch's own compile times
            say("run", f"note: rank {rank.rank}: compile times from torch's timers ({type(exc).__name__}: {exc})")
    if profiler is not None and profiler.result is not None:
        from dynascope.cli.compile_profile import write_json
        from dynascope.render.html import COMPILE_PROFILE_FILE

        write_json(profiler.result, os.path.join(own_dir, COMPILE_PROFILE_FILE))
    outer = os.environ.get(_launch.OUTER_VAR)
    last = _launch.mark_done(out_dir, rank, {"traces": traces, "explanation": explanation, "pid": os.getpid(),
                                             "failed": error is not None})  # fmt: skip
    if last and not outer:
        base = stem[: stem.rfind("-rank")]
        _job_report(out_dir, base, os.path.basename(script), ns)
        return
    then = "the job report follows when the launcher is done" if outer else (
        "the job report comes from the last rank to finish")
    print(f"dynascope run: rank {rank.rank}: trace {', '.join(traces) or '(none)'}; {then}", file=sys.stderr)


def _job_report(out_dir: str, stem: str, script_name: str, ns: argparse.Namespace) -> None:
    """The report of every rank's traces in out_dir: report.html and the terminal summary, once per job."""
    from dynascope import launch as _launch
    from dynascope.render._analysis import summarize_paths
    from dynascope.render.terminal import render_short

    traces: list[Any] = _launch.rank_traces(out_dir, stem)
    if not traces:
        say("run", f"note: no rank's trace in {out_dir}; no job report")
        return
    explanations = sorted(glob.glob(os.path.join(glob.escape(out_dir), "rank*", "explanation.json")),
                          key=lambda p: int(re.sub(r"\D", "", os.path.basename(os.path.dirname(p))) or 0))  # fmt: skip
    explained: Any = None
    if explanations:
        from dynascope.render.html import load_explanation

        explained = load_explanation(explanations[0])
        if ns.library_frames:
            explained["library_frames"] = True
    summary = summarize_paths(traces, top=max(ns.top, 1), explanation=explained, explanation_beside=True)
    html_explanation: Any = explained
    if len(summary.explanations) > 1:  # every rank's explanation was read
        from dynascope.analyze.ranks import merged_explanation

        html_explanation = merged_explanation(summary.explanations)
    eager_glob = os.path.join(glob.escape(out_dir), EAGER_DIR, f"{glob.escape(stem)}-rank*-*.pfw*")
    eager: list[Any] = sorted(glob.glob(eager_glob))
    if eager:
        from dynascope.analyze.payoff import with_eager

        summary = with_eager(summary, summarize_paths(eager, top=max(ns.top, 1)))
    html = None
    if not ns.no_html:
        from dynascope.render.html import write_html

        ranks = len({re.sub(r"-\d+\.pfw(\.gz)?$", "", os.path.basename(t)) for t in traces})
        html = write_html(summary, os.path.join(out_dir, "report.html"), html_explanation,
                          title=f"dynascope run {script_name} ({ranks} ranks)")  # fmt: skip
    print()
    render_short(summary, top=ns.top)
    print()
    for i, trace in enumerate(traces):
        if i == 8 and len(traces) > 9:
            print(f"trace        ... and {len(traces) - 8} more in {out_dir}")
            break
        print(f"trace        {trace}")
    if explanations:
        shown = explanations[0] if len(explanations) == 1 else os.path.join(out_dir, "rank*", "explanation.json")
        print(f"explanation  {shown}  ({len(explanations)} rank(s); one .py per compiled function beside each)")
    if html is not None:
        print(f"report       {html}")
    print(f"next         dynascope report {out_dir}   ·   dynascope convert ... -o trace.json (for Perfetto)")


def _our_options(argv: list[str], out_dir: str) -> list[str]:
    """Our options as given before the launcher, with --out made absolute (the ranks may start elsewhere)."""
    parser = _parser()
    takes_value = {s for a in parser._actions if a.nargs is None and a.option_strings for s in a.option_strings}
    ours: list[str] = []
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        name = argv[i].split("=", 1)[0]
        if name == "--out":
            i += 1 if "=" in argv[i] else 2
            continue
        ours.append(argv[i])
        if name in takes_value and "=" not in argv[i] and i + 1 < len(argv):
            ours.append(argv[i + 1])
            i += 1
        i += 1
    return ["--out", out_dir, *ours]


def _run_launcher(argv: list[str], ns: argparse.Namespace, launcher: list[str]) -> int:
    """`dynascope run [opts] torchrun ARGS`: torchrun with each child under `python -m dynascope run [opts]`,
    then the job report from every rank's files."""
    import signal
    import subprocess

    from dynascope import launch as _launch

    out_dir = os.path.abspath(ns.out)
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the output directory {ns.out}: {exc.strerror or exc}") from None
    job = _launch.rewrite_launch(launcher, _our_options(argv, out_dir))
    say("run", f"{os.path.basename(ns.script)} starts {job.nproc} rank(s) per node, each under `python -m dynascope "
               f"run --out {ns.out}`; the job report follows when they are done")  # fmt: skip
    env = {**os.environ, _launch.OUTER_VAR: str(os.getpid())}
    sys.stdout.flush()
    child = subprocess.Popen(job.command, env=env)

    def forward(signum: int, _frame: Any) -> None:
        child.send_signal(signum)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        while True:
            try:
                status = child.wait()
                break
            except KeyboardInterrupt:  # Ctrl-C reached the launcher too: it stops its ranks
                continue
    finally:
        signal.signal(signal.SIGTERM, previous)
    sys.stdout.flush()
    if _launch.rank_traces(out_dir, job.stem):
        _job_report(out_dir, job.stem, job.stem, ns)
    else:
        say("run", f"note: the launcher left no rank's trace in {out_dir}")
    if status < 0:  # the launcher died of a signal: so do we
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    return status
