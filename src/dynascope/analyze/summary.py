"""Summaries of a trace frame. Pure polars: this module never imports torch.

The Summary dataclass is the contract between analysis and rendering (terminal, HTML, JSON, CSV).
Durations are microseconds; `share` is a fraction in [0, 1] of the table's total.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl


@dataclass
class Summary:
    # name, cat, count, total_us, mean_us, p50_us, p95_us, share   (op events, cat "dynamo"), sorted by total desc
    by_op: pl.DataFrame
    # layer, module_type, count, total_us, forward_us, backward_us, share
    by_layer: pl.DataFrame
    # phase ("forward" / "backward" / "inference"), count, total_us, share
    by_phase: pl.DataFrame
    # compile_id, graph, phase, calls, ops_per_call, total_us, mean_call_us
    by_graph: pl.DataFrame
    # epoch, step, total_us, op_us, op_count   (from user regions; empty frame when there are none)
    by_step: pl.DataFrame
    # pid, host, rank, events, op_us, compile_us
    by_process: pl.DataFrame
    # kind ("compile" / "run"), compile_id, total_us, share   (one row per compile id for compile, one "run" row)
    compile_vs_run: pl.DataFrame
    top: int = 20
    # files, events, ops, span_us, dropped_lines, warnings: list[str]
    meta: dict = field(default_factory=dict)
