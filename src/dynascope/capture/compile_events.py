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
from ..trace.spans import OpenSpans

_installed = False
_lock = threading.Lock()
_open = OpenSpans()  # per thread: compiles on one thread nest


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
    thread = threading.get_ident()
    if phase == "B":
        args = _scalar_args(event.get("args"))
        if "compile_id" not in args:
            cid = _torch.record_compile_id(record)
            if cid is not None:
                args["compile_id"] = cid
        _open.begin(thread, name, ts, args)
    elif phase == "E":
        span = _open.end(thread, name, ts)
        if span is not None:
            span.args.update(_scalar_args(event.get("args")))
            emit(("P", name, "dynamo.compile", span.start, span.end, span.args))


def install() -> None:
    global _installed
    with _lock:
        if not _installed:
            _torch.add_structured_trace_handler(_on_record)
            _installed = True
