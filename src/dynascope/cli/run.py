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
import sys
from typing import Any

from dynascope.artifacts.run_dir import EAGER_DIR
from dynascope.capture.backend_choice import BACKEND_CHOICES, tracing_compiles
from dynascope.cli._script_line import parse_script_line
from dynascope.console import say, script_exit_status
from dynascope.errors import ConfigError


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
    ns = parse_script_line(_parser(), argv, module=True)
    return ns, (ns.script if ns.module else None)


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
    session.memory_sampler_ready(timeout=2.0)  # its first sample before the program's: a short step gets one too
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
        session.finalize(error)
    eager_dir = os.path.join(out_dir, EAGER_DIR)
    if os.path.isdir(eager_dir):
        _stale_traces(eager_dir, stem)
    if ns.compare_eager and error is None:
        _eager_pass(script, ns.args, os.path.join(eager_dir, stem + ".pfw.gz"), config, run_script)
    elif ns.compare_eager:
        say("run", "note: --compare-eager skipped: the script did not finish, so there is nothing to compare")
    sys.stdout.flush()
    if rank is None:
        from dynascope.render import outputs

        outputs.write_run_outputs(out_dir, stem, script, observer, error, ns, profiler)
    else:
        from dynascope.render import outputs

        outputs.write_rank_outputs(out_dir, stem, rank, script, observer, error, ns, profiler)
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
    from dynascope.capture.memory import EagerSaved

    session = TraceSession(trace, config=config)
    session.open()
    saved = EagerSaved() if session.config.memory else contextlib.nullcontext()
    try:
        with _torch.force_eager(), saved:
            error = run_script(script, args)
    finally:
        session.finalize()
    if error is not None:
        say("run", f"note: the eager run raised {type(error).__name__}: {error}; its numbers cover what ran")


# -- many ranks (launch.py; docs/ranks.md, "Launching") --------------------------------------------------------


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
        from dynascope.render import outputs

        outputs.write_job_report(out_dir, job.stem, job.stem, ns)
    else:
        say("run", f"note: the launcher left no rank's trace in {out_dir}")
    if status < 0:  # the launcher died of a signal: so do we
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    return status
