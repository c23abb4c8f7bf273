"""Compile phases as trace events, from torch's own compile timers.

Dynamo times its phases (entire_frame_compile, dynamo tracing, backend_compile, AOT, inductor) and
publishes them as chromium begin/end events on its structured log. We pair each begin with its end
and record one complete event in category "dynamo.compile", so a single timeline shows compile and
run. Installed once per process, the first time a tracing backend is created.

Every event names the compile it belongs to. Torch writes `str(None)` as the compile id of an event
logged on a thread with no compile of its own (inductor's compile workers, compiling C++ or Triton
code for the compile the main thread waits in); such an event is charged to the compile open on another
thread of the process at that moment (the one that began last), else to the compile begun last.
"""

from __future__ import annotations

import threading

import orjson

from dynascope import _torch
from dynascope.trace.buffers import emit, now_ns
from dynascope.trace.format import COMPILE_CAT
from dynascope.trace.spans import OpenSpans

_installed = False
_lock = threading.Lock()
_open = OpenSpans()  # per thread: compiles on one thread nest
_last_compile: list[str] = []  # the compile id begun last in this process (one item, or none yet)

# what torch writes as the compile id of an event outside any compile (str(None))
NO_COMPILE_ID = ("", "None", "null")


def _scalar_args(args: object) -> dict:
    if not isinstance(args, dict):
        return {}
    out = {k: v for k, v in args.items() if isinstance(v, (str, int, float, bool)) and v is not None}
    if str(out.get("compile_id", "")).strip() in NO_COMPILE_ID:
        out.pop("compile_id", None)
    return out


def _served_compile(thread: int) -> str | None:
    """The compile an event on `thread` with no compile id of its own serves: the compile open on another
    thread now that began last, else the compile begun last in the process, else None."""
    best: tuple[float, str] | None = None
    for key, _name, start, args in _open.open_spans():
        cid = args.get("compile_id")
        if key != thread and isinstance(cid, str) and (best is None or start >= best[0]):
            best = (start, cid)
    if best is not None:
        return best[1]
    return _last_compile[0] if _last_compile else None


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
        own = args.get("compile_id") or _torch.record_compile_id(record)
        if own is not None:
            _last_compile[:] = [str(own)]
            args["compile_id"] = str(own)
        else:
            served = _served_compile(thread)
            if served is not None:
                args["compile_id"] = served
        _open.begin(thread, name, ts, args)
    elif phase == "E":
        span = _open.end(thread, name, ts)
        if span is not None:
            end_args = _scalar_args(event.get("args"))
            if "compile_id" in span.args:  # the id it began with (or the compile it serves) stays
                end_args.pop("compile_id", None)
            span.args.update(end_args)
            emit(("P", name, COMPILE_CAT, span.start, span.end, span.args))


def install() -> None:
    global _installed
    with _lock:
        if not _installed:
            _torch.add_structured_trace_handler(_on_record)
            _installed = True
