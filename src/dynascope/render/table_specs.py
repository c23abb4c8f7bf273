"""The column layout of each summary table: which columns, their labels, kinds and the order a narrow
terminal leaves them out in. Terminal, HTML, JSON and CSV all describe the same Summary tables from these
specs, so that the four agree (render/_fmt.py formats the values)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Col:
    key: str  # column name in the Summary frame
    label: str  # header shown to people
    kind: str = "text"  # text | part (a step part, shown by its label) | id | int | us | share | ratio | float
    #                     | bytes | names (a list of paths)
    # text columns only (a number is never cut, wrapped or narrowed below its widest cell): the narrowest
    # the terminal makes it before it drops a column, the widest it lets it grow, and whether its cells
    # are sentences that wrap (else names, cut with "…")
    min_width: int = 12
    max_width: int | None = None
    wrap: bool = False


# the parts of a step (by_step's `<part>_us` columns, analyze/stepparts.py) and their labels, in column order
STEP_PARTS = (
    ("data", "data"),
    ("forward", "forward"),
    ("eval", "eval"),
    ("backward", "backward"),
    ("optimizer", "optimizer"),
    ("io", "I/O"),
    ("compile", "compile"),
    ("comm", "comm"),  # exposed communication: only where the trace has collectives (analyze/stepparts.py)
    ("other", "other"),
)


@dataclass(frozen=True)
class TableSpec:
    attr: str  # Summary attribute
    title: str
    cols: tuple[Col, ...]
    limit_to_top: bool = True  # cut to Summary.top rows when rendering
    drop: tuple[str, ...] = ()  # keys of the columns a narrow terminal leaves out, first to last (see below)


# How a terminal table fits its width (render/_table.py; `fit_widths` below does the arithmetic). Numbers
# are never cut: a time, size, share or count cell is printed whole ("18.5 ms") or its column is left
# out. When a table is wider than the terminal:
#   1. text columns narrow, down to their Col.min_width (names are cut with "…", sentences wrap);
#   2. then the columns in the table's `drop` tuple are left out, first to last, one at a time, until
#      the table fits (text columns widen again into the room freed);
#   3. then the text columns that are left narrow further (to their header's width);
#   4. then, last, the remaining columns from the right (never the first).
# Each table's `drop` is its documented order: least important first; a column not named is kept to the
# end. The title says which columns were left out.
# No two rows may read alike (render/_table.py, FitTable.widths): where leaving a column out, or cutting
# names with "…", would print two rows whose text cells (names, ids, phases, layers: not the numbers) are
# the same though the rows differ, the most important left-out text column that tells some of them
# apart (the last in the drop order) is kept (narrowed; the next column of the drop order goes in its
# place), again until the rows read apart or no left-out column tells them apart; a name column whose
# cut cells collide is cut in its middle instead ("function._scaled_dot_prod…backward.default"), keeping
# the end where the names differ. The kernel table adds, where two kernels read alike in every column
# (two extern_kernels.mm of one layer's backward), a "call" column: the arguments of the wrapper's call
# that launches each. The step table never leaves a part out: it counts it in "other" (see by_step).


TABLES: tuple[TableSpec, ...] = (
    TableSpec(
        "by_op",
        "Ops",
        (
            Col("name", "op", min_width=28, max_width=48),
            Col("cat", "cat"),
            Col("count", "count", "int"),
            Col("total_us", "total", "us"),
            Col("gpu_us", "GPU", "us"),
            Col("mean_us", "mean", "us"),
            Col("p50_us", "p50", "us"),
            Col("p95_us", "p95", "us"),
            Col("share", "share", "share"),
        ),
        drop=("cat", "p50_us", "p95_us", "gpu_us", "mean_us", "count"),
    ),
    TableSpec(
        "by_kernel",
        "Kernels (inductor)",
        (
            Col("name", "kernel", min_width=28, max_width=48),
            Col("compile_id", "compile"),
            Col("phase", "phase"),
            Col("count", "calls", "int"),
            Col("total_us", "total", "us"),
            Col("gpu_us", "GPU", "us"),
            Col("mean_us", "mean", "us"),
            Col("share", "share", "share"),
            Col("fused", "fused ops", min_width=10, max_width=26),
            Col("layers", "layers", min_width=10, max_width=20),
        ),
        drop=("fused", "layers", "mean_us", "compile_id", "count", "phase", "gpu_us"),
    ),
    TableSpec(
        "by_layer",
        "Layers",
        (
            Col("layer", "layer", min_width=16, max_width=48),
            Col("module_type", "module"),
            Col("count", "ops", "int"),
            Col("total_us", "total", "us"),
            Col("gpu_us", "GPU", "us"),
            Col("forward_us", "forward", "us"),
            Col("backward_us", "backward", "us"),
            Col("share", "share", "share"),
        ),
        drop=("module_type", "count", "gpu_us", "forward_us", "backward_us"),
    ),
    TableSpec(
        "by_phase",
        "Forward vs backward",
        (
            Col("phase", "phase"),
            Col("count", "ops", "int"),
            Col("total_us", "total", "us"),
            Col("share", "share", "share"),
        ),
        limit_to_top=False,
        drop=("count",),
    ),
    TableSpec(
        "by_device",
        "What ran on the GPU",
        (
            Col("device", "device", "id"),
            Col("stream", "stream", "id"),
            Col("activity", "kind"),
            Col("count", "count", "int"),
            Col("total_us", "busy", "us"),
            Col("share", "share", "share"),
            Col("launched", "launched by an op", "share"),
        ),
        limit_to_top=False,
        drop=("launched", "count", "stream"),
    ),
    TableSpec(
        "gpu_launchers",
        "Who launched the GPU's work",
        (
            Col("launched_from", "launched from"),
            Col("count", "count", "int"),
            Col("total_us", "busy", "us"),
            Col("share", "share", "share"),
        ),
        limit_to_top=False,
        drop=("count",),
    ),
    TableSpec(
        "memory_by_layer",
        "Saved for the backward, per layer",
        (
            Col("layer", "layer", min_width=16, max_width=40),
            Col("saved_bytes", "compiled saves", "bytes"),
            Col("eager_saved_bytes", "eager saves", "bytes"),
            Col("tensors", "tensors", "int"),
            Col("recomputed", "recomputed in the backward", min_width=16, max_width=40),
            Col("saved", "saved tensors", min_width=16, max_width=48),
        ),
        drop=("saved", "tensors", "recomputed"),
    ),
    TableSpec(
        "memory_by_graph",
        "Memory per compiled graph",
        (
            Col("compile_id", "compile id"),
            Col("graph", "graph", min_width=16, max_width=40),
            Col("phase", "phase"),
            Col("calls", "calls", "int"),
            Col("peak_max", "process peak in a call", "bytes"),
            Col("grew_per_call", "left in use per call", "bytes"),
            Col("estimated_peak", "estimated peak", "bytes"),
            Col("inductor_peak", "inductor's estimate", "bytes"),
            Col("saved_bytes", "saved for backward", "bytes"),
        ),
        limit_to_top=False,
        drop=("inductor_peak", "calls", "compile_id", "grew_per_call", "saved_bytes", "estimated_peak"),
    ),
    TableSpec(
        "memory_by_step",
        "Memory per step",
        (
            Col("rank", "rank", "id"),
            Col("step", "step", "id"),
            Col("peak_max", "process peak", "bytes"),
            Col("eager_peak", "eager's peak", "bytes"),
            Col("peak_at", "running at the peak", min_width=16, max_width=48),
        ),
        drop=("eager_peak", "rank"),
    ),
    TableSpec(
        "out_of_memory",
        "Out of memory",
        (
            Col("rank", "rank", "id"),
            Col("pid", "pid", "id"),
            Col("error", "error", min_width=20, max_width=60, wrap=True),
            Col("graph", "graph"),
            Col("phase", "phase"),
            Col("op", "op", min_width=16, max_width=40),
            Col("layer", "layer"),
            Col("file", "file"),
            Col("line", "line", "id"),
            Col("memory", "memory then", "bytes"),
        ),
        limit_to_top=False,
        drop=("pid", "file", "line", "phase", "rank"),
    ),
    TableSpec(
        "by_graph",
        "Compiled graphs",
        (
            Col("compile_id", "compile id"),
            Col("graph", "graph", max_width=48),
            Col("phase", "phase"),
            Col("calls", "calls", "int"),
            Col("ops_per_call", "ops/call", "float"),
            Col("total_us", "total", "us"),
            Col("mean_call_us", "mean/call", "us"),
        ),
        drop=("ops_per_call", "mean_call_us", "graph", "calls"),
    ),
    TableSpec(
        "by_step",
        "Steps",
        (
            Col("epoch", "epoch", "id"),
            Col("step", "step", "id"),
            Col("total_us", "wall", "us"),
            *(Col(f"{part}_us", label, "us") for part, label in STEP_PARTS),
            Col("compiles", "compiles", "int"),
            Col("saved", "saved", "names"),
            Col("op_us", "op time", "us"),
            Col("op_count", "ops", "int"),
            Col("gpu_us", "GPU busy", "us"),
            Col("gpu_idle_us", "GPU idle", "us"),
            # where the trace has collectives (analyze/comm.py): comm_us above is the exposed part
            Col("compute_us", "compute", "us"),
            Col("comm_total_us", "comm in flight", "us"),
            Col("comm_hidden_us", "comm hidden", "us"),
            Col("overlap", "overlap", "share"),
        ),
        drop=(
            "comm_hidden_us", "comm_total_us", "compute_us", "overlap", "saved", "op_count", "op_us", "gpu_idle_us",
            "gpu_us", "compiles", "epoch", "io_us", "data_us", "optimizer_us", "eval_us",
        ),  # a part left out is counted in "other" (terminal.StepTable), which is never in this order
    ),
    TableSpec(
        "step_stats",
        "Step parts over the steps",
        (
            Col("part", "part", "part"),
            Col("median_us", "median", "us"),
            Col("p95_us", "p95", "us"),
            Col("mean_us", "mean", "us"),
            Col("share", "share", "share"),
        ),
        limit_to_top=False,
        drop=("mean_us", "p95_us"),
    ),
    TableSpec(
        "slow_steps",
        "Slowest steps",
        (
            Col("epoch", "epoch", "id"),
            Col("step", "step", "id"),
            Col("total_us", "wall", "us"),
            Col("over_us", "over median", "us"),
            Col("why", "what was different", min_width=24, wrap=True),
        ),
        limit_to_top=False,
        drop=("epoch",),
    ),
    TableSpec(
        "by_file",
        "File I/O",
        (
            Col("fname", "file", min_width=30, max_width=50),
            Col("total_us", "time", "us"),
            Col("share", "share", "share"),
            Col("opens", "opens", "int"),
            Col("reads", "reads", "int"),
            Col("bytes_read", "read", "bytes"),
            Col("writes", "writes", "int"),
            Col("bytes_written", "written", "bytes"),
            Col("saves", "saves", "int"),
            Col("loads", "loads", "int"),
            Col("processes", "procs", "int"),
            Col("workers", "workers", "int"),
            Col("compile_us", "in compile", "us"),
        ),
        drop=(
            "workers", "processes", "opens", "loads", "saves", "writes", "reads", "compile_us", "share",
            "bytes_written", "bytes_read",
        ),
    ),
    TableSpec(
        "graph_breaks",
        "Graph breaks by cost",
        (
            Col("source", "line", min_width=40),  # whole up to 40 (else the terminal prints blocks)
            Col("calls", "hits", "int"),
            Col("per_call_us", "per call", "us"),
            Col("per_step_us", "per step", "us"),
            Col("total_us", "total", "us"),
            Col("share", "of call", "share"),
            Col("reason", "why", min_width=20, wrap=True),
            Col("fix", "fix", min_width=20, wrap=True),
        ),
        drop=("fix", "share", "per_step_us", "per_call_us", "calls"),
    ),
    TableSpec(
        "recompiles",
        "Recompiles by cost",
        (
            Col("source", "line", min_width=40),  # whole up to 40 (else the terminal prints blocks)
            Col("calls", "recompiles", "int"),
            Col("total_us", "compile time", "us"),
            Col("per_call_us", "each", "us"),
            Col("function", "function"),
            Col("reason", "guard that failed", min_width=20, wrap=True),
            Col("fix", "fix", min_width=20, wrap=True),
        ),
        drop=("fix", "function", "per_call_us", "calls"),
    ),
    TableSpec(
        "compiled_functions",
        "Compiled functions",
        (
            Col("function", "function"),
            Col("source", "defined"),
            Col("calls", "calls", "int"),
            Col("per_call_us", "per call", "us"),
            Col("graph_us", "graphs", "us"),
            Col("break_us", "breaks", "us"),
            Col("fallback_us", "eager", "us"),
            Col("overhead_us", "overhead", "us"),
            Col("compile_us", "compile", "us"),
            Col("eager_per_call_us", "eager call", "us"),
            Col("speedup", "speedup", "ratio"),
            Col("breakeven_calls", "repaid after", "int"),
        ),
        drop=(
            "source", "overhead_us", "break_us", "fallback_us", "graph_us", "eager_per_call_us", "breakeven_calls",
            "compile_us", "calls",
        ),
    ),
    TableSpec(
        "vs_eager",
        "Compiled against eager",
        (
            Col("what", "what"),
            Col("compiled_us", "compiled", "us"),
            Col("eager_us", "eager", "us"),
            Col("speedup", "speedup", "ratio"),
            Col("compile_us", "compile", "us"),
            Col("breakeven_calls", "repaid after", "int"),
            Col("verdict", "verdict", min_width=20, wrap=True),
        ),
        limit_to_top=False,
        drop=("breakeven_calls", "compile_us", "verdict"),
    ),
    TableSpec(
        "cache_entries",
        "Cache entries",
        (
            Col("compile_id", "compile id"),
            Col("function", "function"),
            Col("kind", "kind"),
            Col("calls", "calls", "int"),
            Col("per_call_us", "per call", "us"),
            Col("total_us", "total", "us"),
            Col("compile_us", "compile", "us"),
        ),
        drop=("kind", "total_us", "compile_us", "calls"),
    ),
    TableSpec(
        "by_process",
        "Processes",
        (
            Col("pid", "pid", "id"),
            Col("host", "host", max_width=48),
            Col("rank", "rank", "id"),
            Col("events", "events", "int"),
            Col("op_us", "op time", "us"),
            Col("compile_us", "compile time", "us"),
        ),
        drop=("events", "host", "rank", "compile_us"),
    ),
    TableSpec(
        "compile_vs_run",
        "Compile vs run",
        (
            Col("kind", "kind"),
            Col("compile_id", "compile id"),
            Col("total_us", "total", "us"),
            Col("share", "share", "share"),
        ),
        limit_to_top=False,
    ),
    # collectives across ranks (analyze/comm.py, docs/ranks.md)
    TableSpec(
        "hangs",
        "Hang: ranks stopped while waiting in a collective",
        (
            Col("rank", "rank", "id"),
            Col("state", "state", min_width=8),
            Col("op", "collective", min_width=10),
            Col("pg", "group", "id"),
            Col("seq", "seq", "id"),
            Col("step", "step", "id"),
            Col("waits_for", "waits for", min_width=6),
            Col("where", "where", min_width=20, wrap=True),
            Col("file_end", "trace", min_width=10, wrap=True),
        ),
        limit_to_top=False,
        drop=("file_end", "pg", "waits_for", "step"),
    ),
    TableSpec(
        "stragglers",
        "Stragglers: the rank that issued collectives last, and what it did instead",
        (
            Col("rank", "rank", "id"),
            Col("epoch", "epoch", "id"),
            Col("step", "step", "id"),
            Col("late_us", "late by", "us"),
            Col("op", "collective", min_width=10),
            Col("seq", "seq", "id"),
            Col("collectives", "last in", "int"),
            Col("doing", "doing instead", min_width=16, wrap=True),
            Col("doing_us", "for", "us"),
        ),
        drop=("epoch", "seq", "collectives", "op"),
    ),
    TableSpec(
        "collectives",
        "Collectives joined across ranks (pg, seq)",
        (
            Col("pg", "group", "id"),
            Col("seq", "seq", "id"),
            Col("op", "collective", min_width=10),
            Col("source", "source", min_width=6),
            Col("bytes", "bytes", "bytes"),
            Col("ranks", "ranks", "int"),
            Col("completed", "done", "int"),
            Col("step", "step", "id"),
            Col("last_rank", "last rank", "id"),
            Col("late_us", "late by", "us"),
        ),
        drop=("source", "completed", "bytes", "step"),
    ),
    TableSpec(
        "clocks",
        "Clocks: each rank's offset from the reference host's",
        (
            Col("rank", "rank", "id"),
            Col("host", "host", max_width=40),
            Col("offset_us", "offset", "us"),
            Col("residual_us", "residual", "us"),
            Col("collectives", "collectives", "int"),
            Col("how", "how", min_width=16, wrap=True),
        ),
        limit_to_top=False,
        drop=("collectives", "residual_us"),
    ),
)

SPEC_BY_ATTR = {spec.attr: spec for spec in TABLES}

# One row per rank (analyze/ranks.by_rank), in the terminal and the HTML's ranks section; the JSON and CSV
# give the frame whole. Not in TABLES: a trace without ranks has no such table at all.
RANK_SPEC = TableSpec("by_rank", "Ranks", (
    Col("rank", "rank", "id"),
    Col("host", "host", max_width=24),
    Col("pid", "pid", "id"),
    Col("processes", "procs", "int"),
    Col("steps", "steps", "int"),
    Col("step_median_us", "median step", "us"),
    Col("compile_us", "compile", "us"),
    Col("recompiles", "recompiles", "int"),
    Col("graph_breaks", "graph breaks", "int"),
    Col("graphs", "graphs", "int"),
    Col("status", "trace", min_width=8, max_width=20),
), drop=("processes", "pid", "host", "graphs", "graph_breaks", "steps"))  # fmt: skip
