"""Readers and summaries of trace files. Never imports torch: traces can be analysed anywhere.

    read_trace(paths, *, columns=None) -> polars.DataFrame        (reader)
    read_trace_with_info(paths, *, columns=None) -> (frame, ReadInfo)
    summarize(frame, top=20) -> Summary                            (summarize)
    summarize_files(paths, top=20, scheduler=None, workers=None) -> Summary
    diff_summaries(a, b) -> dict[str, polars.DataFrame]            (diff)
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "read_trace": "reader",
    "read_trace_with_info": "reader",
    "ReadInfo": "reader",
    "TraceWarning": "reader",
    "summarize": "summarize",
    "summarize_files": "summarize",
    "Summary": "summary",
    "diff_summaries": "diff",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dynascope.analyze' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
