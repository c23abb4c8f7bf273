"""Graphs that run untraced because tracing could not instrument them (a torch internal moved, or the
instrumentation failed): the graph still runs, as the inner backend runs it; stderr gets one line per
distinct reason, and the trace gets a record of which graph of which compile ran untraced, and why.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

from dynascope.errors import DynascopeError
from dynascope.trace.buffers import emit, now_ns

_warned: set[str] = set()
_lock = threading.Lock()


def reason_of(exc: BaseException) -> str:
    text = str(exc) if isinstance(exc, DynascopeError) else f"{type(exc).__name__}: {exc}"
    return (text.strip().splitlines() or [type(exc).__name__])[0]


def report(graph: str, compile_id: str, phase: str, exc: BaseException, runs_with: str) -> None:
    """Record in the trace that `graph` (`phase`) of `compile_id` runs untraced; warn once per reason."""
    from dynascope.capture.frames import graph_untraced

    if phase != "backward":
        graph_untraced(graph)  # its frame's time cannot be split into graph and eager time
    reason = reason_of(exc)
    now = now_ns()
    args = {"kind": "untraced", "graph": graph, "compile_id": compile_id, "phase": phase,
            "runs_with": runs_with, "reason": reason}
    emit(("P", f"untraced {graph}.{phase}", "dynascope", now, now, args))
    with _lock:
        if reason in _warned:
            return
        _warned.add(reason)
    print(f"dynascope: graph {graph} ({phase}) of compile {compile_id} runs untraced with {runs_with}: {reason}",
          file=sys.stderr)


def boxed_interpreter(fx_graph: Any) -> Callable:
    """Run an AOT graph untraced in the boxed convention, as torch 2.5.1's aot_eager runs every graph
    (torch.fx.Interpreter.boxed_run: correct whatever was done to the graph's generated code)."""
    from torch.fx import Interpreter

    interpreter = Interpreter(fx_graph)

    def run(args: list) -> Any:
        return interpreter.boxed_run(args)

    run._boxed_call = True  # type: ignore[attr-defined]
    return run
