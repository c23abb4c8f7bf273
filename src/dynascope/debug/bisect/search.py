"""Backend bisect: the first stage of torch's compile stack that raises or changes results, the graph
and the op responsible, and a standalone repro.

    result = dynascope.bisect(model, x)            # a module, a function, or a zero-argument step
    dynascope bisect train.py --epochs 1           # an unmodified script

Stages, in order: no compile (the reference, run twice: a program that does not repeat itself is
reported as such, never as a compiler bug), then "eager" (Dynamo only), "aot_eager" (+ AOTAutograd),
"aot_eager_decomp_partition" (+ inductor's decompositions and partitioner), "inductor", then every
other backend asked for. Each stage starts from the same state and the same random numbers.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from dynascope.debug.bisect import graphs
from dynascope.debug.bisect.compare import compare
from dynascope.debug.bisect.execute import differs, first_line, root_error, run, same_error
from dynascope.debug.bisect.localize import Search, find_op, judge
from dynascope.debug.bisect.narrow import inductor_subsystem
from dynascope.debug.bisect.programs import CallProgram, ScriptProgram
from dynascope.debug.bisect.record import CapturedGraph, RunRecord
from dynascope.debug.bisect.result import BisectResult, StageResult
from dynascope.debug.bisect.stages import Stage, stages
from dynascope.errors import DynascopeError


class ProgramError(DynascopeError):
    """The program fails without any compile: there is nothing to bisect."""


def bisect(fn: Any, *args: Any, backends: tuple = (), repro: str | None = None, progress: bool = True,
           seed: int = 0, stages: tuple[str, ...] | None = None, **kwargs: Any) -> BisectResult:  # fmt: skip
    """Find the first stage that breaks or changes `fn(*args, **kwargs)`, the op responsible and, with
    `repro` (a directory), write a standalone repro of it. `stages` limits the built-in stages (e.g.
    to skip one known to be broken); `backends` adds yours. See docs/debug.md."""
    program = CallProgram(fn, args, kwargs, seed)
    return run_bisect(program, list(backends), repro, _printer(progress), stages)


def bisect_script(path: str, argv: list[str], backends: list[Any], repro: str | None, progress: bool = True,
                  calls: int = 2, stages: list[str] | None = None) -> BisectResult:  # fmt: skip
    return run_bisect(ScriptProgram(path, argv, calls=calls), backends, repro, _printer(progress), stages)


def _printer(on: bool) -> Callable[[str], None]:
    def say(text: str) -> None:
        if on:
            print(f"dynascope bisect: {text}", file=sys.stderr, flush=True)

    return say


def run_bisect(program: Any, backends: list[Any], repro: str | None, say: Callable[[str], None],
               builtin: Any = None) -> BisectResult:  # fmt: skip
    started = time.perf_counter()
    stages(backends, list(builtin) if builtin is not None else None)  # a bad name fails before any run
    result = BisectResult()
    say("reference run (no compile)")
    reference = program.run(None)
    if reference.error is not None:
        if reference.output.strip():
            print(reference.output.rstrip()[-4000:], file=sys.stderr)
        raise ProgramError(f"the program fails without compiling ({type(reference.error).__name__}: "
                           f"{first_line(reference.error)}); fix that first, there is no compile to blame")  # fmt: skip
    again = program.run(None)
    noise = compare(reference.values, again.values, "reference")
    if noise is not None:
        result.notes.append(f"the program does not repeat itself without compiling ({noise.describe()}); seed "
                            "its randomness or make it deterministic, then bisect again")  # fmt: skip
        result.seconds = time.perf_counter() - started
        return result
    for stage in stages(backends + list(program.requested), list(builtin) if builtin is not None else None):
        say(f"stage {stage.name} ...")
        record = program.run(stage)
        status = _judge_run(stage, reference, record)
        result.stages.append(status)
        result.compiles += len(record.graphs)
        say(f"stage {stage.name}: {status.status} ({status.seconds:.1f} s, {status.graphs} graphs)"
            + (f": {status.detail}" if status.detail else ""))  # fmt: skip
        if status.status != "ok":
            _blame(result, stage, status, record, say, repro)
            break
    result.seconds = time.perf_counter() - started
    return result


def _judge_run(stage: Stage, reference: RunRecord, record: RunRecord) -> StageResult:
    status = StageResult(stage.name, "ok", record.seconds, len(record.graphs))
    if record.error is not None:
        status.status, status.detail = (
            "exception",
            f"{type(root_error(record.error)).__name__}: {first_line(record.error)}",
        )
        return status
    mismatch = compare(reference.values, record.values, "result")
    if mismatch is not None:
        status.status, status.detail = "accuracy", mismatch.describe()
    return status


def _blame(result: BisectResult, stage: Stage, status: StageResult, record: RunRecord, say: Callable[[str], None],
           repro: str | None) -> None:  # fmt: skip
    result.first_bad_stage, result.kind = stage.name, status.status
    result.stack_layer, result.next_step = stage.layer, stage.next_step
    if record.error is not None:
        result.error = _short(record.error)
        result.error_source = user_source(record.error)
    bad = _bad_graph(stage, record, say)
    if bad is None:
        return
    graph, verdict = bad
    result.graph, result.compile_id, result.graph_size = graph.name, graph.compile_id, graphs.size(graph.gm)
    say(f"graph {graph.name} ({result.graph_size} ops) is where {stage.name} goes wrong; finding the op ...")
    search = Search()
    op = find_op(graph.gm, graph.best_inputs, stage, verdict, search)
    result.compiles += search.compiles + 2
    result.op = op
    if op is not None:
        say(f"op {op.target} (node {op.node}" + (f", layer {op.layer}" if op.layer else "")
            + (f", {op.source}" if op.source else "") + ")")  # fmt: skip
    if repro is not None and op is not None:
        from dynascope.debug.bisect.repro import write_repro

        written = write_repro(repro, graph, stage, op, verdict, say)
        result.repro, result.repro_size = written.directory, written.size
        result.compiles += written.compiles
        if stage.name == "inductor" and result.kind == "accuracy":
            say("narrowing to an inductor subsystem (torch's CompilerBisector) ...")
            narrowing = Search()
            result.inductor_subsystem = inductor_subsystem(
                written.gm, written.inputs, lambda gm, inputs, stage: _accuracy_fails(gm, inputs, stage, narrowing)
            )
            result.compiles += narrowing.compiles


def _accuracy_fails(gm: Any, inputs: list, stage: Stage, search: Search) -> bool:
    search.compiles += 1
    staged = run(gm, inputs, stage)
    return staged.failed or differs(run(gm, inputs), staged) is not None


def _bad_graph(stage: Stage, record: RunRecord, say: Callable[[str], None]) -> tuple[CapturedGraph, Any] | None:
    """The first captured graph the stage gets wrong on its own, rerun on its recorded inputs."""
    for graph in record.graphs:
        if graph.error is None and graph.inputs is None:
            continue  # compiled, never run
        verdict = judge(graph.gm, graph.best_inputs, stage)
        if not verdict.bad:
            continue
        if verdict.staged.failed and record.error is not None and not same_error(record.error, verdict.staged.error):
            continue  # another failure than the one the run raised
        return graph, verdict
    if record.graphs:
        say(f"no single graph reproduces the failure on its recorded inputs ({len(record.graphs)} graphs checked)")
    return None


def _short(exc: BaseException, lines: int = 4) -> str:
    exc = root_error(exc)
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return "\n".join(text[:lines]) + ("\n..." if len(text) > lines else "")


def user_source(exc: BaseException) -> str:
    """file:line of the innermost frame in the user's code where the exception came from: Dynamo's
    own record of the user frame it was tracing when it has one, else the traceback's."""
    frames = list(getattr(exc, "real_stack", None) or [])
    if not frames:
        frames = [f for f, _ in traceback.walk_tb(exc.__traceback__)]
        frames = [traceback.FrameSummary(f.f_code.co_filename, f.f_lineno, f.f_code.co_name) for f in frames]
    for frame in reversed(frames):
        if not _is_library(frame.filename):
            return f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}"
    return ""


def _is_library(filename: str) -> bool:
    import os
    import sysconfig

    import torch

    roots = {os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(__file__)),
             sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"]}  # fmt: skip
    full = os.path.abspath(filename)
    return filename.startswith("<") or any(full.startswith(root + os.sep) for root in roots)
