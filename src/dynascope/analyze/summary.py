"""Summaries of a trace frame. Pure polars: this module never imports torch.

The Summary dataclass is the contract between analysis and rendering (terminal, HTML, JSON, CSV).
Durations are microseconds; `share` is a fraction in [0, 1] of the table's total.
Columns after the documented ones were added later; renderers may ignore them.
Conventions (what counts as an op, a region, compile time) are in `dynascope.analyze.summarize`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl


def _empty() -> pl.DataFrame:
    return pl.DataFrame()


@dataclass
class Summary:
    # name, cat, count, total_us, mean_us, p50_us, p95_us, share   (op events, cat "dynamo"), sorted by total desc
    #   + min_us, max_us.  Every op, not only the top N (see `top_ops`).  p50/p95: nearest-rank, exact.
    by_op: pl.DataFrame
    # layer, module_type, count, total_us, forward_us, backward_us, share
    #   + inference_us.  Op events only; sorted by total desc.
    by_layer: pl.DataFrame
    # phase ("forward" / "backward" / "inference"), count, total_us, share   (op events)
    by_phase: pl.DataFrame
    # compile_id, graph, phase, calls, ops_per_call, total_us, mean_call_us
    #   + ops (op events attributed to the graph).  calls/total_us from "dynamo.graph" events.
    by_graph: pl.DataFrame
    # epoch, step, total_us, op_us, op_count   (from user regions; empty frame when there are none)
    #   + regions (how many regions carry this epoch/step; total_us is the sum of their durations).
    #   Sorted by epoch, step.
    by_step: pl.DataFrame
    # pid, host, rank, events, op_us, compile_us
    #   + world_size, run_us.  Sorted by rank, host, pid.
    by_process: pl.DataFrame
    # kind ("compile" / "run"), compile_id, total_us, share   (one row per compile id for compile, one "run" row)
    #   compile ids in natural order, then the run row (compile_id null).
    compile_vs_run: pl.DataFrame
    top: int = 20
    # files, events, ops, span_us, dropped_lines, warnings: list[str]
    #   `files` is the list of trace file paths.  + compile_us, run_us, dropped_events (the writers'
    #   own count of events they could not write, from `end` records).
    meta: dict = field(default_factory=dict)
    # by_op.head(top): the top N ops by total time
    top_ops: pl.DataFrame = field(default_factory=_empty)
