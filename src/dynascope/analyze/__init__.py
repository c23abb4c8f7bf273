"""Readers and summaries of trace files. Never imports torch: traces can be analysed anywhere.

Reading (one job per module): paths -> lines (bytes, gzip, sniffing) -> records (what a record means) /
templates (the CSV fast path) -> resolve (hashes, attribution) -> reader (drives them: read_trace).
Summarising: partial (mergeable Partial, OpReducer) <- fastpath (byte scanner, _scan) / dask;
steps (step attribution); stepparts (automatic steps, the parts of each step); stepstats (statistics
over the steps, the slowest steps and why); finish (Partial -> Summary); summarize (entry points); diff (A vs B).

    read_trace(paths, *, columns=None) -> polars.DataFrame        (reader)
    read_trace_with_info(paths, *, columns=None) -> (frame, ReadInfo)
    summarize(frame, top=20) -> Summary                            (summarize)
    summarize_files(paths, top=20, scheduler=None, workers=None) -> Summary
    diff_summaries(a, b) -> dict[str, polars.DataFrame]            (diff)
"""

from __future__ import annotations

from dynascope._lazy import lazy_exports

_EXPORTS = {
    "read_trace": "dynascope.analyze.read.reader",
    "read_trace_with_info": "dynascope.analyze.read.reader",
    "ReadInfo": "dynascope.analyze.read.readinfo",
    "TraceWarning": "dynascope.analyze.read.readinfo",
    "summarize": "dynascope.analyze.pipeline",
    "summarize_files": "dynascope.analyze.pipeline",
    "Summary": "dynascope.analyze.summary",
    "diff_summaries": "dynascope.analyze.summary_diff",
}

__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
