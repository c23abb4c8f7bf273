"""Summaries of a trace frame. Pure polars: this module never imports torch.

The Summary dataclass is the contract between analysis and rendering (terminal, HTML, JSON, CSV).
Durations are microseconds; `share` is a fraction in [0, 1] of the table's total.
Columns after the documented ones were added later; renderers may ignore them.
Conventions (what counts as an op, a region, compile time) are in `dynascope.analyze.pipeline`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypedDict

import polars as pl

from dynascope.artifacts.explanation import Report


class SummaryMeta(TypedDict):
    """What a Summary knows besides its tables."""

    files: list[str]  # the trace file paths
    events: int
    ops: int
    span_us: int
    compile_us: int
    run_us: int
    dropped_lines: int  # lines skipped as unreadable
    dropped_events: int  # the writers' own count of events they could not write (`end` records)
    warnings: list[str]


def summary_meta(
    files: Iterable[str] = (),
    events: int = 0,
    ops: int = 0,
    span_us: int = 0,
    compile_us: int = 0,
    run_us: int = 0,
    dropped_lines: int = 0,
    dropped_events: int = 0,
    warnings: Iterable[str] = (),
) -> SummaryMeta:
    """The one builder of a SummaryMeta."""
    return SummaryMeta(
        files=list(files),
        events=events,
        ops=ops,
        span_us=span_us,
        compile_us=compile_us,
        run_us=run_us,
        dropped_lines=dropped_lines,
        dropped_events=dropped_events,
        warnings=list(warnings),
    )


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
    # epoch, step, total_us, op_us, op_count   (steps: user regions with an epoch or step, else automatic
    #   steps closed by optimizer steps (epoch null); empty frame when there are none)
    #   + regions (how many step windows carry this epoch/step; total_us is the sum of their durations)
    #   + data_us, forward_us, eval_us, backward_us, optimizer_us, io_us, compile_us, other_us (the parts of the
    #   windows, adding up to total_us), compiles (compile ids begun in them), compile_ids (list), saved
    #   (list of files torch.save'd or written in them).  Sorted by epoch, step.  (analyze/stepparts.py)
    by_step: pl.DataFrame
    # pid, host, rank, events, op_us, compile_us
    #   + world_size, run_us.  Sorted by rank, host, pid.
    by_process: pl.DataFrame
    # kind ("compile" / "run"), compile_id, total_us, share   (one row per compile id for compile, one "run" row)
    #   compile ids in natural order, then the run row (compile_id null).
    compile_vs_run: pl.DataFrame
    top: int = 20
    meta: SummaryMeta = field(default_factory=summary_meta)
    # by_op.head(top): the top N ops by total time
    top_ops: pl.DataFrame = field(default_factory=_empty)
    # name, kernel_kind, compile_id, graph, phase, count, total_us, mean_us, p50_us, max_us, share,
    #   fused (short names of the ATen ops it covers), layer, module_type, layers, lines, code, target,
    #   kernel_code (hash into `sources`).  Inductor kernel events only (docs/trace-format.md), one row per
    #   kernel call site of a compiled graph; share is of all kernel time.  Sorted by total desc.
    by_kernel: pl.DataFrame = field(default_factory=_empty)
    # the code each kernel row runs (a generated kernel's C++/Triton source, else its wrapper line), by hash
    sources: dict[str, str] = field(default_factory=dict)
    # part ("total", then data, forward, backward, optimizer, io, compile, other), median_us, p95_us, mean_us,
    #   total_us, share (of the steps' wall time), max_us: over the by_step rows that are steps
    #   (analyze/stepstats.py).  Empty without steps.
    step_stats: pl.DataFrame = field(default_factory=_empty)
    # epoch, step, total_us, over_us (over the median step), part (the one that stands out, or null),
    #   excess_us (over its median), why (plain words): the slowest steps, slowest first (up to 3).
    slow_steps: pl.DataFrame = field(default_factory=_empty)
    # fname (the path; null for events that name no file; a group's label), group (program / other: one
    #   file; python / dynascope / compiler cache / pipes: one row for all such files), files (how many),
    #   total_us (time in the file's I/O events: per thread the union of their intervals), share (of all
    #   rows' total_us but the pipes'; null for the pipes: waiting, not I/O), opens, reads, bytes_read, writes,
    #   bytes_written, io_us (in its POSIX events), saves, save_us, loads, load_us (torch.save / torch.load),
    #   processes (how many touched it), workers (of them DataLoader workers), events, compile_events,
    #   compile_us (the events, and their time, that start inside a compile phase of their thread: torch
    #   reading its own sources at the first inductor compile).  One row per file of a POSIX or torch.io
    #   event or per group, the program's files first, the groups last, each by total_us desc.  Bytes count
    #   once: a torch.load/save's `bytes` only where no read/write of the file is seen inside it
    #   (analyze/files.py; docs/trace-format.md, "Files read and written").
    by_file: pl.DataFrame = field(default_factory=_empty)
    # What each graph break costs at run time (analyze/breaks.py, analyze/costs.py): source ("file.py:LINE",
    #   the line that caused it), reason, fix, calls (hits), total_us, per_call_us (per call of the compiled
    #   function that holds it), per_step_us, per_hit_us, share (of that function's call time), kind ("graph
    #   break" / "eager function": Dynamo ran a whole function eagerly), function, file, line, code,
    #   compile_ids, warmup_calls, warmup_us (in warm-up calls: those that compiled or ran a cache entry the
    #   first time), warmup_only, measurable, note, detail.
    #   Steady state (calls that compiled nothing), most costly first.
    graph_breaks: pl.DataFrame = field(default_factory=_empty)
    # source (the line of the guard that failed, where known), reason, fix, calls (recompiles of this
    #   cause), total_us (their compile time), per_call_us, per_step_us, function, file, line, code, subject,
    #   compile_ids.  Most costly first.
    recompiles: pl.DataFrame = field(default_factory=_empty)
    # function, source, calls, per_call_us (mean steady call), median_us, graph_us, break_us, fallback_us,
    #   overhead_us (per steady call: they add up to per_call_us), total_us (all calls), first_call_us,
    #   compile_us (every compile id that compiled or ran in its calls), compiles, warmup_calls, file, line;
    #   + eager_per_call_us, speedup, breakeven_calls, verdict after a --compare-eager run.
    compiled_functions: pl.DataFrame = field(default_factory=_empty)
    # compile_id, function, kind ("function" / "resume function"), source, calls, total_us, per_call_us,
    #   graph_us, compile_us, file, line: one row per cache entry that ran, then (kind "none") one row for
    #   the compiles that left no cache entry that ran (failed, or skipped by Dynamo: a resume function with
    #   no ops), compile_id listing their ids, so that the compile_us column adds up to the compile total.
    cache_entries: pl.DataFrame = field(default_factory=_empty)
    # what ("calls of <function>" / "steps"), compiled_calls, eager_calls, compiled_us, eager_us (medians),
    #   speedup, saving_us, compile_us, breakeven_calls, noisy, verdict: the run against its eager
    #   comparison run (analyze/payoff.py); empty unless compared (`dynascope run --compare-eager`).
    vs_eager: pl.DataFrame = field(default_factory=_empty)
    # device, stream, activity ("kernel" / "memcpy" / "memset"), count, total_us, share (of all device time),
    #   launched (the share of it launched inside a traced op): what ran on the GPU (analyze/gpu.py).  Empty
    #   without device events.  Where there are, by_op, by_layer and by_kernel gain gpu_us (the device time
    #   of what each row launched) and by_step gains gpu_us (busy) and gpu_idle_us (the GPU waited).
    by_device: pl.DataFrame = field(default_factory=_empty)
    # launched_from, count, total_us, share: who launched the device's work: "traced ops and kernels", the
    #   training-step events (optimizer.step, backward, dataloader.next, ...) the rest was launched in,
    #   and what is left ("elsewhere ..."): analyze/gpu.py.  Empty without device events.
    gpu_launchers: pl.DataFrame = field(default_factory=_empty)
    # Many ranks (analyze/ranks.py, docs/ranks.md). Where the trace has ranks, by_step is the job's: one row per
    #   step, its wall time and parts the slowest rank's, + rank (that rank), ranks (how many ranks had it).
    # rank, then every by_step column: each rank's steps.  Empty without ranks.
    by_rank_step: pl.DataFrame = field(default_factory=_empty)
    # rank, host, pid (its main process), processes (with its DataLoader workers), steps, step_median_us,
    #   compile_us, recompiles, graph_breaks (null: no explanation), graphs (compile ids begun), status
    #   ("complete" / "cut by SIGTERM" / "no end record"), explanation (whether its explanation was read).
    by_rank: pl.DataFrame = field(default_factory=_empty)
    # kind ("recompile" / "graphs" / "graph break" / "collective"), at, step, ranks (those that differ, "1, 3"),
    #   detail, source (the guard's or break's line; the collective's group and sequence number), hang_risk:
    #   where the ranks did different things, the first first.  Empty with fewer than two ranks.
    divergence: pl.DataFrame = field(default_factory=_empty)
    # rank -> that rank's explanation (artifacts/explanation.py's Report), for every rank that has one.  Where the
    #   ranks' explanations differ, recompiles and graph_breaks gain `ranks` (the ranks a row happened on, "1" /
    #   "0, 2"; null: every rank).
    explanations: dict[int, Report] = field(default_factory=dict)
    # rank -> the explanation.json its explanation was read from (a rank's explanation given in memory has none)
    explanation_files: dict[int, str] = field(default_factory=dict)
    # Collectives (analyze/comm.py, docs/ranks.md). Where the trace has them, by_step and by_rank_step gain
    #   compute_us, comm_total_us (collectives in flight), comm_hidden_us (in flight under compute), overlap
    #   (hidden / total); the part comm_us is the exposed communication.
    # rank, host, offset_us (subtracted from its times), residual_us, collectives (how many aligned it), how
    clocks: pl.DataFrame = field(default_factory=_empty)
    # pg, seq, op, source, bytes, group_size, ranks, completed, all_completed, first_issue_us, last_issue_us,
    #   last_rank, late_us, last_done_us, epoch, step, rank_list, issue_list, done_list: one row per collective
    #   joined across ranks by (pg, seq); times µs from the job's first event on aligned clocks.
    collectives: pl.DataFrame = field(default_factory=_empty)
    # rank, epoch, step, op, pg, seq, late_us, collectives, doing, doing_us: per rank and step it issued
    #   collectives last, how late and what it did instead; most late first.
    stragglers: pl.DataFrame = field(default_factory=_empty)
    # rank, state ("waiting" / "never issued"), op, pg, seq, since_us, epoch, step, waits_for, where, file_end:
    #   a job stopped while ranks waited in a collective.  Empty otherwise.
    hangs: pl.DataFrame = field(default_factory=_empty)
    # Memory (analyze/memory.py, docs/memory.md). compile_id, graph, phase, calls, peak_max (the highest memory
    #   sample within a call), grew_per_call (memory in use at a call's end minus at its start, mean), and from
    #   the explanation estimated_peak (that phase's, by the graph's liveness), inductor_peak (inductor's own
    #   estimate after fusion, where inductor compiled the graph itself), saved_bytes (forward rows:
    #   activations kept for the backward) and symbolic (compiled with symbolic sizes). Empty without memory
    #   samples or an explanation with memory.
    memory_by_graph: pl.DataFrame = field(default_factory=_empty)
    # rank, step, peak_max (the highest memory sample in the step), peak_at (the graph call or step part
    #   running then). Empty without memory samples.
    memory_by_step: pl.DataFrame = field(default_factory=_empty)
    # layer, saved_bytes, tensors: activations the compiled graphs keep for the backward, per layer (from the
    #   explanation). Empty without one.
    memory_by_layer: pl.DataFrame = field(default_factory=_empty)
    # rank, pid, error, graph, phase, op, layer, file, line, memory (resident bytes then): each process whose
    #   program ended out of memory (MemoryError, torch.OutOfMemoryError, "can't allocate memory"), with what
    #   its main thread ran then (the end record's `running`). Empty otherwise.
    out_of_memory: pl.DataFrame = field(default_factory=_empty)

    def table(self, name: str) -> pl.DataFrame:
        """One of the tables by its name (TABLE_NAMES), as renderers that loop over tables ask for them."""
        if name not in TABLE_NAMES:
            raise KeyError(f"no summary table {name!r}; the tables are {', '.join(TABLE_NAMES)}")
        return getattr(self, name)


TABLE_NAMES = (
    "by_op", "by_layer", "by_phase", "by_graph", "by_step", "by_process", "compile_vs_run", "top_ops", "by_kernel",
    "step_stats", "slow_steps", "by_file", "graph_breaks", "recompiles", "compiled_functions", "cache_entries",
    "vs_eager", "by_device", "gpu_launchers", "by_rank_step", "by_rank", "divergence",
    "clocks", "collectives", "stragglers", "hangs", "memory_by_graph", "memory_by_step", "memory_by_layer",
    "out_of_memory",
)  # fmt: skip
