"""Mergeable partial summaries: the one contract between reading and summarising.

A `Partial` is keyed integer sums over part of a trace (whole processes); `merge` adds partials of
disjoint sets of files, `finish.finish` turns the merged one into a Summary. Every per-thread
computation (step attribution, compile-time unions, compile-vs-run per process) runs inside one
(trace_file, pid) group, and percentiles come from exact per-op duration histograms, so a trace split
any way by file merges to the same answer.

The Partial, its tables' keys and schemas, and merge are here; building one file's Partial is in
analyze/partial_build.py. Three ways build it, all to the same numbers: `partial(frame)` from rows,
`general_file_partial(path)` from the general reader with op events reduced per chunk (`OpReducer`),
and `fastpath.file_partial(path)` from the byte scanner, which fills an `OpReducer` too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import polars as pl

from dynascope.analyze import breaks, comm, gpu, memory
from dynascope.analyze.files import FILE_SCHEMA
from dynascope.analyze.stepparts import (
    COMM_NUMBER_COLUMNS,
    LIST_COLUMNS,
    PART_COLUMNS,
)  # fmt: skip

# what an inductor kernel event's OH record says besides an op's fields (docs/trace-format.md)
KERNEL_FIELDS = ["kernel_kind", "target", "layers", "lines", "code", "kernel_code"]

# what summaries read; read_file(columns=SUMMARY_COLUMNS) keeps only these
SUMMARY_COLUMNS = [
    "trace_file", "name", "cat", "pid", "tid", "ts", "dur", "phase", "layer", "module_type",
    "compile_id", "graph", "epoch", "step", "host", "rank", "world_size", "reason", *KERNEL_FIELDS, "opt", "fname",
    "ret", "bytes", *(c for c in breaks.FRAME_COLUMNS if c != "reason"), "launcher", "device", "stream", "activity",
    "ltid", "launch", "grad_enabled", "pg", "seq", "state", "signal",
    *(c for c in comm.COMM_COLUMNS if c not in ("pg", "seq", "state", "signal")), *memory.SAMPLE_COLUMNS,
    *memory.END_COLUMNS, memory.SAVED_COLUMN,
]  # fmt: skip

_STR_KEYS = [
    "name", "cat", "phase", "layer", "module_type", "compile_id", "graph", "host", "trace_file", *KERNEL_FIELDS,
    "qualname", "function", "file", "top_qualname", "top_file", "break_file", "break_code", "reason", "launcher",
    "activity", "entry_function", "entry_file",
]  # fmt: skip
# the integer columns of SUMMARY_COLUMNS
_INT_KEYS = ("pid", "tid", "ts", "dur", "epoch", "step", "rank", "world_size", "opt", "ret", "bytes", "id", "line",
             "resume", "graphs", "breaks", "break_line", "break_at", "device", "stream", "entry_line",
             "grad_enabled", "seq", *(c for c in comm.COMM_INT_COLUMNS if c != "seq"),
             *memory.SAMPLE_COLUMNS, "oom", "rss_at_end", memory.SAVED_COLUMN)  # fmt: skip

@dataclass
class PartialMeta:
    """What a partial knows besides its tables: files, event counts, time span, what reading dropped."""

    file_names: list[str] = field(default_factory=list)
    events: int = 0
    ops: int = 0
    ts_min: int | None = None
    end_max: int | None = None
    dropped_lines: int = 0
    dropped_events: int = 0
    warnings: list[str] = field(default_factory=list)
    untraced: dict[str, int] = field(default_factory=dict)  # graphs that ran untraced, by reason
    sources: dict[str, str] = field(default_factory=dict)  # kernel source hash -> code (KS records)

    @classmethod
    def merged(cls, metas: Iterable[PartialMeta]) -> PartialMeta:
        out = cls()
        for m in metas:
            out.file_names = sorted(set(out.file_names) | set(m.file_names))
            out.events += m.events
            out.ops += m.ops
            out.dropped_lines += m.dropped_lines
            out.dropped_events += m.dropped_events
            out.warnings += m.warnings
            for reason, n in m.untraced.items():
                out.untraced[reason] = out.untraced.get(reason, 0) + n
            out.sources.update(m.sources)
            out.ts_min = _extreme(min, out.ts_min, m.ts_min)
            out.end_max = _extreme(max, out.end_max, m.end_max)
        return out


def _extreme(pick, a, b):
    return b if a is None else a if b is None else pick(a, b)


@dataclass
class Partial:
    """Mergeable aggregates of part of a trace. Every table is keyed; values are integer sums."""

    op_hist: pl.DataFrame  # name, cat, dur, n
    kernel: pl.DataFrame  # KERNEL_KEYS, dur, n   (inductor kernel events only)
    layer: pl.DataFrame  # layer, module_type, phase, count, total_us
    graph: pl.DataFrame  # compile_id, graph, phase, calls, total_us, ops
    step: pl.DataFrame  # epoch, step, regions, total_us, op_us, op_count, <part>_us..., compiles, compile_ids, saved
    process: pl.DataFrame  # host, pid, rank, world_size, events, op_us, compile_us, run_us
    compile: pl.DataFrame  # compile_id, total_us
    file: pl.DataFrame  # fname, files.FILE_COUNTS   (POSIX and torch.io events per file path: analyze/files.py)
    # graph breaks and compiled calls (analyze/breaks.py): per break site, per compiled function, per cache
    # entry, and the calls' durations
    brk: pl.DataFrame = field(default_factory=lambda: _empty("brk"))
    calls: pl.DataFrame = field(default_factory=lambda: _empty("calls"))
    entry: pl.DataFrame = field(default_factory=lambda: _empty("entry"))
    call_hist: pl.DataFrame = field(default_factory=lambda: _empty("call_hist"))
    fn_ids: pl.DataFrame = field(default_factory=lambda: _empty("fn_ids"))
    gpu: pl.DataFrame = field(default_factory=lambda: _empty("gpu"))  # device time per launcher (analyze/gpu.py)
    # per process of a file: its rank (null: none), host, how its file ended (status), the compile ids it began
    proc_file: pl.DataFrame = field(default_factory=lambda: _empty("proc_file"))
    # per rank: the collectives it issued (pg, seq: the group's sequence number, else the issue order), their
    #   operation, bytes and the step they were issued in (analyze/ranks.py compares them across ranks)
    comm_seq: pl.DataFrame = field(default_factory=lambda: _empty("comm_seq"))
    # collectives per rank and how each process's file ended (analyze/comm.py)
    comm: pl.DataFrame = field(default_factory=lambda: _empty("comm"))
    comm_proc: pl.DataFrame = field(default_factory=lambda: _empty("comm_proc"))
    # memory samples joined to graph calls and steps (analyze/memory.py)
    mem_graph: pl.DataFrame = field(default_factory=lambda: _empty("mem_graph"))
    mem_step: pl.DataFrame = field(default_factory=lambda: _empty("mem_step"))
    mem_oom: pl.DataFrame = field(default_factory=lambda: _empty("mem_oom"))
    mem_saved: pl.DataFrame = field(default_factory=lambda: _empty("mem_saved"))
    meta: PartialMeta = field(default_factory=PartialMeta)

KERNEL_KEYS = ["name", "compile_id", "graph", "phase", "layer", "module_type", *KERNEL_FIELDS]
_KEYS = {
    "op_hist": ["name", "cat", "dur"],
    "kernel": [*KERNEL_KEYS, "dur"],
    "layer": ["layer", "module_type", "phase"],
    "graph": ["compile_id", "graph", "phase"],
    "step": ["rank", "epoch", "step"],
    "process": ["host", "pid", "rank", "world_size"],
    "compile": ["compile_id"],
    "file": ["fname"],
    "brk": breaks.BREAK_KEYS,
    "calls": breaks.CALL_KEYS,
    "entry": breaks.ENTRY_KEYS,
    "call_hist": ["qualname", "file", "line", "warmup", "dur"],
    "fn_ids": ["qualname", "file", "line", "compile_id"],
    "gpu": gpu.GPU_KEYS,
    "proc_file": ["trace_file", "pid", "rank", "host", "status"],
    "comm_seq": ["rank", "pg", "seq", "op", "step"],
    **comm.KEYS,
    **memory.KEYS,
}
_SCHEMAS: dict[str, dict[str, pl.DataType | type[pl.DataType]]] = {
    "op_hist": {"name": pl.String, "cat": pl.String, "dur": pl.Int64, "n": pl.Int64},
    "kernel": {**dict.fromkeys(KERNEL_KEYS, pl.String), "dur": pl.Int64, "n": pl.Int64},
    "layer": {"layer": pl.String, "module_type": pl.String, "phase": pl.String,
              "count": pl.Int64, "total_us": pl.Int64},
    "graph": {"compile_id": pl.String, "graph": pl.String, "phase": pl.String,
              "calls": pl.Int64, "total_us": pl.Int64, "ops": pl.Int64},
    "step": {"rank": pl.Int64, "epoch": pl.Int64, "step": pl.Int64,
             "regions": pl.Int64, "total_us": pl.Int64, "op_us": pl.Int64, "op_count": pl.Int64,
             **dict.fromkeys(PART_COLUMNS, pl.Int64), "compiles": pl.Int64, "gpu_us": pl.Int64,
             **dict.fromkeys(COMM_NUMBER_COLUMNS, pl.Int64),
             **dict.fromkeys(LIST_COLUMNS, pl.List(pl.String))},
    "process": {"host": pl.String, "pid": pl.Int64, "rank": pl.Int64, "world_size": pl.Int64,
                "events": pl.Int64, "op_us": pl.Int64, "compile_us": pl.Int64, "run_us": pl.Int64},
    "compile": {"compile_id": pl.String, "total_us": pl.Int64},
    "file": FILE_SCHEMA,
    **breaks.SCHEMAS,
    "gpu": gpu.GPU_SCHEMA,
    "proc_file": {"trace_file": pl.String, "pid": pl.Int64, "rank": pl.Int64, "host": pl.String, "status": pl.String,
                  "events": pl.Int64, "compile_ids": pl.List(pl.String)},
    "comm_seq": {"rank": pl.Int64, "pg": pl.String, "seq": pl.Int64, "op": pl.String, "bytes": pl.Int64,
                 "step": pl.Int64, "n": pl.Int64},
    **comm.SCHEMAS,
    **memory.SCHEMAS,
}  # fmt: skip



def _ensure(frame: pl.DataFrame) -> pl.DataFrame:
    exprs = []
    for c in SUMMARY_COLUMNS:
        if c not in frame.columns:
            dt = pl.Int64 if c in _INT_KEYS else pl.String
            exprs.append(pl.lit(None, dtype=dt).alias(c))
    if exprs:
        frame = frame.with_columns(exprs)
    casts = []
    for c in _INT_KEYS:
        if frame.schema[c] != pl.Int64:
            casts.append(pl.col(c).cast(pl.Int64, strict=False))
    for c in ("cat",):
        if frame.schema[c] not in (pl.String, pl.Categorical):
            casts.append(pl.col(c).cast(pl.String))
    if casts:
        frame = frame.with_columns(casts)
    # Chrome-trace cat is a comma-separated list ("dynamo,forward" in converted files): the first counts
    cats = [c for c in frame.get_column("cat").unique().drop_nulls().cast(pl.String).to_list() if "," in c]
    if cats:
        first = pl.col("cat").cast(pl.String).replace(cats, [c.split(",", 1)[0] for c in cats])
        frame = frame.with_columns(first.cast(frame.schema["cat"]).alias("cat"))
    return frame.select(SUMMARY_COLUMNS)


def _str_keys(df: pl.DataFrame) -> pl.DataFrame:
    exprs = [pl.col(c).cast(pl.String) for c in df.columns if c in _STR_KEYS and df.schema[c] != pl.String]
    return df.with_columns(exprs) if exprs else df


def _conform(name: str, df: pl.DataFrame) -> pl.DataFrame:
    schema = _SCHEMAS[name]
    return _str_keys(df).select([pl.col(c).cast(t, strict=False) for c, t in schema.items()])


def _empty(name: str) -> pl.DataFrame:
    return pl.DataFrame(schema=_SCHEMAS[name])


def _sum_by(df: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Per `keys`: numbers summed (those named `*_max`: their highest), lists (of names) joined into their
    sorted distinct items, and `peak_at` (what ran at the peak) kept from the row with the highest `peak_max`."""
    vals = [c for c in df.columns if c not in keys]
    return df.group_by(keys).agg(_merged(c, df.schema[c]) for c in vals)


def _merged(c: str, dtype: pl.DataType) -> pl.Expr:
    if isinstance(dtype, pl.List):
        return _joined(c)
    if c.endswith("_max"):
        return pl.col(c).max()
    if c == "peak_at":
        return pl.col(c).sort_by("peak_max").last()
    return _sum_or_unknown(c)


_UNKNOWABLE = ("gpu_us",)  # null where part of it was not measured (analyze/gpu.py, paused_in_windows)


def _sum_or_unknown(c: str) -> pl.Expr:
    """The sum of a number column; for those that can be unknown, null when any part is."""
    if c not in _UNKNOWABLE:
        return pl.col(c).sum()
    return pl.when(pl.col(c).null_count() > 0).then(None).otherwise(pl.col(c).sum()).alias(c)


def _joined(c: str) -> pl.Expr:
    """A list column's items, over a group: sorted, each once."""
    return pl.col(c).list.explode(keep_nulls=False, empty_as_null=False).drop_nulls().unique().sort()


def merge(partials: Iterable[Partial]) -> Partial:
    """Combine partials of disjoint sets of processes (files)."""
    partials = list(partials)
    tables = {}
    for name, keys in _KEYS.items():
        parts = [getattr(p, name) for p in partials]
        parts = [p for p in parts if p.height] or [_empty(name)]
        tables[name] = _sum_by(pl.concat(parts, how="vertical_relaxed"), keys)
    meta = PartialMeta.merged(p.meta for p in partials)
    return Partial(meta=meta, **tables)
