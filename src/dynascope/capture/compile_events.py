"""Compile phases as trace events, from torch's own compile timers.

Dynamo times its phases (entire_frame_compile, dynamo tracing, backend_compile, AOT, inductor) and
publishes them as chromium begin/end events on its structured log. We pair each begin with its end
and record one complete event in category "dynamo.compile", so a single timeline shows compile and
run. Installed once per process, the first time a tracing backend is created.
"""

from __future__ import annotations

import threading

import orjson

from .. import _torch
from ..trace.buffers import emit, now_ns

_installed = False
_lock = threading.Lock()
_open = threading.local()


def _scalar_args(args: object) -> dict:
    if not isinstance(args, dict):
        return {}
    return {k: v for k, v in args.items() if isinstance(v, (str, int, float, bool)) and v is not None}


def _on_record(record: dict, payload: str | None) -> None:
    if "chromium_event" not in record or not payload:
        return
    event = orjson.loads(payload)
    phase, name = event.get("ph"), event.get("name")
    if not isinstance(name, str):
        return
    # Our own clock, read as torch logs the event (microseconds later), so that compile phases nest
    # exactly with regions and graph calls; torch's wall-clock stamps could drift against it.
    ts = now_ns()
    stack = getattr(_open, "stack", None)
    if stack is None:
        stack = _open.stack = []
    if phase == "B":
        args = _scalar_args(event.get("args"))
        if "compile_id" not in args:
            cid = _torch.record_compile_id(record)
            if cid is not None:
                args["compile_id"] = cid
        stack.append((name, ts, args))
    elif phase == "E":
        for index in range(len(stack) - 1, -1, -1):
            if stack[index][0] == name:
                _, start, args = stack.pop(index)
                del stack[index:]  # anything opened inside and never closed
                args.update(_scalar_args(event.get("args")))
                emit(("P", name, "dynamo.compile", start, ts, args))
                return


def install() -> None:
    global _installed
    with _lock:
        if not _installed:
            _torch.add_structured_trace_handler(_on_record)
            _installed = True
