"""Summaries of a trace frame, computed as mergeable partial aggregates.

`summarize(frame)` = `finish(partial(frame))`. Many files (or Dask partitions) give
`finish(merge([partial(f) for f in files]))`, which is identical: every partial table is a group-by of
integer sums keyed by values, every per-thread computation (step attribution, compile-time unions,
compile-vs-run per process) runs inside one (trace_file, pid) group, and percentiles come from exact
per-op duration histograms (durations are integer microseconds).

Conventions:

- op events: `cat == "dynamo"`; graph calls: `"dynamo.graph"`; compile phases: `"dynamo.compile"`;
  user regions: any other cat except `dftracer`/`dynascope`.
- percentiles are nearest-rank: p50 is the smallest duration d such that at least 50% of the op's
  events last <= d.
- an op belongs to the innermost user region that has an `epoch` or `step` arg on the same
  (trace_file, pid, tid) and whose [ts, ts+dur] interval contains the op's start.
- compile time per compile id is the union of its compile-phase intervals in each process (nested
  phases are not counted twice). Run time per process is the sum of its graph calls, or of its op
  events when it has no graph events.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from .reader import ReadInfo, expand_paths, graph_refs, map_files, norm_hash, read_file_state
from .summary import Summary

__all__ = [
    "Partial",
    "SUMMARY_COLUMNS",
    "file_partial",
    "finish",
    "merge",
    "partial",
    "summarize",
    "summarize_files",
]

OP_CAT = "dynamo"
GRAPH_CAT = "dynamo.graph"
COMPILE_CAT = "dynamo.compile"
NON_REGION_CATS = [OP_CAT, GRAPH_CAT, COMPILE_CAT, "dftracer", "dynascope"]

# what summaries read; read_file(columns=SUMMARY_COLUMNS) keeps only these
SUMMARY_COLUMNS = [
    "trace_file", "name", "cat", "pid", "tid", "ts", "dur", "phase", "layer", "module_type",
    "compile_id", "graph", "epoch", "step", "host", "rank", "world_size",
]  # fmt: skip

_STR_KEYS = ["name", "cat", "phase", "layer", "module_type", "compile_id", "graph", "host", "trace_file"]


@dataclass
class Partial:
    """Mergeable aggregates of part of a trace. Every table is keyed; values are integer sums."""

    op_hist: pl.DataFrame  # name, cat, dur, n
    layer: pl.DataFrame  # layer, module_type, phase, count, total_us
    graph: pl.DataFrame  # compile_id, graph, phase, calls, total_us, ops
    step: pl.DataFrame  # epoch, step, regions, total_us, op_us, op_count
    process: pl.DataFrame  # host, pid, rank, world_size, events, op_us, compile_us, run_us
    compile: pl.DataFrame  # compile_id, total_us
    meta: dict = field(default_factory=dict)


_KEYS = {
    "op_hist": ["name", "cat", "dur"],
    "layer": ["layer", "module_type", "phase"],
    "graph": ["compile_id", "graph", "phase"],
    "step": ["epoch", "step"],
    "process": ["host", "pid", "rank", "world_size"],
    "compile": ["compile_id"],
}
_SCHEMAS = {
    "op_hist": {"name": pl.String, "cat": pl.String, "dur": pl.Int64, "n": pl.Int64},
    "layer": {"layer": pl.String, "module_type": pl.String, "phase": pl.String, "count": pl.Int64, "total_us": pl.Int64},
    "graph": {"compile_id": pl.String, "graph": pl.String, "phase": pl.String, "calls": pl.Int64, "total_us": pl.Int64, "ops": pl.Int64},
    "step": {"epoch": pl.Int64, "step": pl.Int64, "regions": pl.Int64, "total_us": pl.Int64, "op_us": pl.Int64, "op_count": pl.Int64},
    "process": {"host": pl.String, "pid": pl.Int64, "rank": pl.Int64, "world_size": pl.Int64, "events": pl.Int64, "op_us": pl.Int64, "compile_us": pl.Int64, "run_us": pl.Int64},
    "compile": {"compile_id": pl.String, "total_us": pl.Int64},
}  # fmt: skip


# ----------------------------------------------------------------------------------------------
# entry points


def summarize(frame: pl.DataFrame, top: int = 20, info: ReadInfo | None = None) -> Summary:
    """Summarise a frame from `read_trace` (see the module docstring for the conventions)."""
    if info is None:
        info = getattr(frame, "_dynascope_info", None)
    return finish(partial(frame, info), top=top)


def summarize_files(
    paths,
    top: int = 20,
    scheduler: str | None = None,
    workers: int | None = None,
    threads: int | None = None,
) -> Summary:
    """Summarise trace files without holding them all in memory: one partial per file, merged.

    With `scheduler` (a Dask scheduler address) or `workers` (a local Dask cluster of N workers) the
    files are read and pre-aggregated on Dask; the result is identical to the single-machine one.
    """
    if scheduler is not None or workers is not None:
        from .dask import summarize_files_dask

        return summarize_files_dask(paths, top=top, scheduler=scheduler, workers=workers)
    files = expand_paths(paths)
    partials = map_files(file_partial, files, threads=threads)
    result = finish(merge(partials), top=top)
    _emit_warnings(result.meta.get("warnings", []))
    return result


def file_partial(path: str | os.PathLike) -> Partial:
    """Read one file (only the columns summaries need) and pre-aggregate it.

    dynascope's own op lines are found and parsed at the byte level (`fastpath`); everything else goes
    through the general reader. Same Partial as `_file_partial_general(path)`.
    """
    from .fastpath import file_partial_fast

    return file_partial_fast(path)


def _file_partial_general(path: str | os.PathLike) -> Partial:
    """Read one file (only the columns summaries need) and pre-aggregate it, with the general reader.

    Op events are aggregated chunk by chunk as they are parsed (a histogram over their raw keys and
    a compact copy of their times), so the file is never held as rows; the histogram is resolved
    through the file's OH/HH records at the end. Same numbers as `partial(read_file(path)[0])`.
    """
    red = _OpReducer()
    others, info, state = read_file_state(path, columns=SUMMARY_COLUMNS, reducer=red)
    hist, times = red.result(state)
    return _core(hist, times, _ensure(others), info)


# raw columns (before resolution) that op events are grouped by per chunk
_RAW_OP_KEYS = ["pid", "hhash", "op", "name", "cat", "dur", "phase", "layer", "module_type", "compile_id", "graph", "host", "rank", "world_size"]


class _OpReducer:
    """Takes op events out of each parsed chunk: a histogram over raw keys, and their times.

    Op events without a reference of their own (op k of a graph call: id = p_idx + 1 + k) are keyed by
    their parent graph call's reference and k, looked up in the graph calls seen so far (a graph
    call's line precedes its ops); any still unknown keep their p_idx until the end of the file.
    """

    def __init__(self):
        self.hists: list[pl.DataFrame] = []
        self.times: list[pl.DataFrame] = []
        self.graphs: list[pl.DataFrame] = []
        self._gmap: pl.DataFrame | None = None

    def _graph_map(self) -> pl.DataFrame:
        if self._gmap is None or self._gmap.height != sum(g.height for g in self.graphs):
            self._gmap = pl.concat(self.graphs) if self.graphs else graph_refs(pl.DataFrame())
        return self._gmap

    def observe(self, frame: pl.DataFrame) -> None:
        """Sees every frame of a chunk before any is reduced: records its graph calls."""
        if "cat" in frame.columns:
            g = graph_refs(frame)
            if g.height:
                self.graphs.append(g)

    def __call__(self, frame: pl.DataFrame) -> pl.DataFrame:
        if "cat" not in frame.columns:
            return frame
        cats = frame.get_column("cat").unique().to_list()
        if OP_CAT not in cats:
            return frame
        is_op = (pl.col("cat") == OP_CAT).fill_null(False)
        only_ops = cats == [OP_CAT]  # the fast path's op frames: nothing to filter
        ops = frame.lazy() if only_ops else frame.lazy().filter(is_op)
        extra = []
        if "p_idx" in frame.columns and "id" in frame.columns:
            need = pl.col("p_idx").is_not_null()
            if "op" in frame.columns:
                need = need & pl.col("op").is_null()
            ops = (
                ops.with_columns(
                    pl.when(need).then(pl.col("id") - pl.col("p_idx") - 1).otherwise(None).cast(pl.Int64).alias("__k"),
                    pl.when(need).then(pl.col("p_idx")).otherwise(None).cast(pl.Int64).alias("__p"),
                    pl.col("pid").cast(pl.Int64),
                )
                .join(self._graph_map().lazy().rename({"p_idx": "__p"}), on=["pid", "__p"], how="left")
                .with_columns(pl.when(pl.col("__gop").is_null()).then(pl.col("__p")).otherwise(None).alias("__pend"))
            )
            extra = ["__gop", "__k", "__pend"]
        keys = [c for c in _RAW_OP_KEYS if c in frame.columns] + extra
        tcols = [pl.col(c) if c in frame.columns else pl.lit(None, dtype=pl.Int64).alias(c) for c in ("pid", "tid", "ts", "dur")]
        hist, times = pl.collect_all([ops.group_by(keys).agg(pl.len().cast(pl.Int64).alias("n")), ops.select(tcols)])
        self.hists.append(hist)
        self.times.append(times)
        return frame.clear() if only_ops else frame.filter(~is_op)

    def result(self, state) -> tuple[pl.DataFrame, pl.DataFrame]:
        """The file's op histogram (_OP_KEYS + n) and its op times (_TIME_COLUMNS)."""
        if not self.hists:
            hist = pl.DataFrame(schema={c: (pl.Int64 if c in ("pid", "dur", "rank", "world_size") else pl.String) for c in _OP_KEYS} | {"n": pl.Int64})
            return hist, pl.DataFrame(schema=dict.fromkeys(_TIME_COLUMNS, pl.Int64))
        raw = pl.concat(self.hists, how="diagonal_relaxed")
        if "__k" in raw.columns:
            pend = raw.filter(pl.col("__pend").is_not_null())
            if pend.height:  # ops whose graph call came later in the file
                done = raw.filter(pl.col("__pend").is_null())
                pend = pend.drop("__gop").join(
                    self._graph_map().rename({"p_idx": "__pend"}), on=["pid", "__pend"], how="left"
                )
                raw = pl.concat([done, pend.select(done.columns)], how="vertical_relaxed")
            raw = raw.join(state.index_table(), on=["__gop", "__k"], how="left")
            if "op" in raw.columns:
                raw = raw.with_columns(pl.coalesce(norm_hash("op", raw), pl.col("__ref")).alias("op"))
            else:
                raw = raw.rename({"__ref": "op"})
            raw = raw.drop([c for c in ("__gop", "__k", "__pend", "__ref") if c in raw.columns])
        keys = [c for c in _RAW_OP_KEYS if c in raw.columns]
        raw = raw.group_by(keys).agg(pl.col("n").sum())
        resolved = state.resolve_frame(raw, SUMMARY_COLUMNS)
        cols = []
        for c in _OP_KEYS:
            if c in resolved.columns:
                cols.append(pl.col(c))
            else:
                cols.append(pl.lit(None, dtype=pl.Int64 if c in ("pid", "dur", "rank", "world_size") else pl.String).alias(c))
        hist = _str_keys(resolved.select(*cols, "n")).group_by(_OP_KEYS).agg(pl.col("n").sum())
        times = pl.concat(self.times, how="vertical_relaxed").select(pl.col(c).cast(pl.Int64) for c in _TIME_COLUMNS)
        return hist, times


def _emit_warnings(msgs: Iterable[str]) -> None:
    import warnings

    from .reader import TraceWarning

    for m in msgs:
        warnings.warn(m, TraceWarning, stacklevel=3)


# ----------------------------------------------------------------------------------------------
# partial


def _ensure(frame: pl.DataFrame) -> pl.DataFrame:
    exprs = []
    for c in SUMMARY_COLUMNS:
        if c not in frame.columns:
            dt = pl.Int64 if c in ("pid", "tid", "ts", "dur", "epoch", "step", "rank", "world_size") else pl.String
            exprs.append(pl.lit(None, dtype=dt).alias(c))
    if exprs:
        frame = frame.with_columns(exprs)
    casts = []
    for c in ("pid", "tid", "ts", "dur", "epoch", "step", "rank", "world_size"):
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


# op events are pre-aggregated to a weighted histogram over these keys (n = how many events)
_OP_KEYS = [
    "trace_file", "pid", "host", "rank", "world_size", "name", "cat", "phase", "layer", "module_type",
    "compile_id", "graph", "dur",
]  # fmt: skip


def partial(frame: pl.DataFrame, info: ReadInfo | None = None) -> Partial:
    """Pre-aggregate a frame (any subset of events, as long as each process's events are all in it)."""
    f = _ensure(frame)
    is_op = (pl.col("cat") == OP_CAT).fill_null(False)
    lf = f.lazy()
    hist, others, span = pl.collect_all(
        [
            lf.filter(is_op).group_by(_OP_KEYS).agg(pl.len().cast(pl.Int64).alias("n")),
            lf.filter(~is_op),
            lf.filter(is_op).select(pl.col("ts").min().alias("a"), (pl.col("ts") + pl.col("dur")).max().alias("b")),
        ]
    )
    # op times are needed only where there are regions, and one file at a time bounds the memory
    regions = _regions(others)
    steps = []
    for name in regions.get_column("trace_file").cast(pl.String).unique().sort().to_list():
        times = lf.filter(is_op & (pl.col("trace_file").cast(pl.String) == name)).select(_TIME_COLUMNS).collect()
        steps.append(_step_partial(others.filter(pl.col("trace_file").cast(pl.String) == name), times))
    step = _sum_by(pl.concat(steps), _KEYS["step"]) if steps else pl.DataFrame(schema=_SCHEMAS["step"])
    return _core(hist, None, others, info, step=step, op_span=span.row(0))


# an op's times, as the step attribution of one file needs them
_TIME_COLUMNS = ["pid", "tid", "ts", "dur"]


def _regions(f: pl.DataFrame) -> pl.DataFrame:
    return f.filter(
        ~pl.col("cat").cast(pl.String).is_in(NON_REGION_CATS)
        & (pl.col("epoch").is_not_null() | pl.col("step").is_not_null())
    )


def _core(
    hist: pl.DataFrame,
    times: pl.DataFrame | None,
    others: pl.DataFrame,
    info: ReadInfo | None,
    step: pl.DataFrame | None = None,
    op_span: tuple | None = None,
) -> Partial:
    """The partial of one file from op events as a weighted histogram (`hist`: _OP_KEYS + n), their
    times (_TIME_COLUMNS) and every other event as rows (`others`). A caller that computed
    the step table and the ops' (min ts, max end) itself passes them instead of `times`."""
    hist = _str_keys(hist)
    graphs = others.filter(pl.col("cat") == GRAPH_CAT)
    weighted = pl.col("n") * pl.col("dur")

    op_hist = hist.group_by(["name", "cat", "dur"]).agg(pl.col("n").sum())
    layer = hist.group_by(["layer", "module_type", "phase"]).agg(
        pl.col("n").sum().alias("count"), weighted.sum().alias("total_us")
    )
    g_calls = graphs.group_by(["compile_id", "graph", "phase"]).agg(
        pl.len().cast(pl.Int64).alias("calls"), pl.col("dur").sum().alias("total_us"), pl.lit(0, dtype=pl.Int64).alias("ops")
    )
    g_ops = hist.group_by(["compile_id", "graph", "phase"]).agg(
        pl.lit(0, dtype=pl.Int64).alias("calls"), pl.lit(0, dtype=pl.Int64).alias("total_us"), pl.col("n").sum().alias("ops")
    )
    graph = _sum_by(pl.concat([_conform("graph", g_calls), _conform("graph", g_ops)]), _KEYS["graph"])

    if step is None:
        step = _step_partial(others, times)
    if op_span is None:
        op_span = times.select(pl.col("ts").min().alias("a"), (pl.col("ts") + pl.col("dur")).max().alias("b")).row(0)
    compile_unions = _compile_unions(others)
    process = _process_partial(others, hist, graphs, compile_unions)
    compile_tbl = _sum_by(
        _conform("compile", compile_unions.group_by("compile_id").agg(pl.col("union_us").sum().alias("total_us"))),
        ["compile_id"],
    )

    n_ops = int(hist.get_column("n").sum() or 0)
    lo = [v for v in (others.get_column("ts").min(), op_span[0]) if v is not None]
    hi = [v for v in (others.select((pl.col("ts") + pl.col("dur")).max()).item(), op_span[1]) if v is not None]
    names = set(others.get_column("trace_file").cast(pl.String).unique().drop_nulls().to_list())
    names |= set(hist.get_column("trace_file").unique().drop_nulls().to_list())
    meta = {
        "file_names": sorted(names),
        "events": others.height + n_ops,
        "ops": n_ops,
        "ts_min": min(lo) if lo else None,
        "end_max": max(hi) if hi else None,
        "dropped_lines": 0,
        "dropped_events": 0,
        "warnings": [],
    }
    if info is not None:
        meta["file_names"] = sorted(set(meta["file_names"]) | set(info.files))
        meta["dropped_lines"] = info.dropped_lines
        meta["dropped_events"] = info.dropped_events
        meta["warnings"] = list(info.warnings)
    return Partial(
        op_hist=_conform("op_hist", op_hist),
        layer=_conform("layer", layer),
        graph=graph,
        step=step,
        process=process,
        compile=compile_tbl,
        meta=meta,
    )


def _sum_by(df: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    vals = [c for c in df.columns if c not in keys]
    return df.group_by(keys).agg([pl.col(c).sum() for c in vals])


def _step_partial(f: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """by_step rows from the regions in `f` and the op times `ops` (_TIME_COLUMNS), both of one file."""
    regions = _regions(f)
    if regions.height == 0:
        return pl.DataFrame(schema=_SCHEMAS["step"])
    op_us, op_count = _ops_per_region(regions, ops)
    out = (
        regions.with_columns(pl.Series("op_us", op_us), pl.Series("op_count", op_count))
        .group_by(["epoch", "step"])
        .agg(
            pl.len().cast(pl.Int64).alias("regions"),
            pl.col("dur").sum().alias("total_us"),
            pl.col("op_us").sum(),
            pl.col("op_count").sum(),
        )
    )
    return _conform("step", out)


def _ops_per_region(regions: pl.DataFrame, ops: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(op_us, op_count) per region row: each op counted in the innermost region that covers its start,
    on its own thread. One compiled pass over the ops per thread, along its segments: no sort of the
    ops (millions of them) and no join."""
    from ._scan import count_in_segments

    op_us = np.zeros(regions.height, dtype=np.int64)
    op_count = np.zeros(regions.height, dtype=np.int64)
    segments = _thread_segments(regions)
    for thread, group in _threads(ops):
        if thread in segments:
            dur = group.get_column("dur")
            dur = dur.fill_null(0) if dur.null_count() else dur
            count_in_segments(*segments[thread], group.get_column("ts").to_numpy(), dur.to_numpy(), op_count, op_us)
    return op_us, op_count


def _thread_segments(regions: pl.DataFrame) -> dict[tuple, tuple[np.ndarray, np.ndarray]]:
    """(pid, tid) -> that thread's elementary segments (see `_innermost_segments`); regions are numbered
    by their row."""
    r = regions.with_row_index("rid").drop_nulls(["pid", "tid", "ts", "dur"])
    segments = {}
    for thread, grp in r.group_by(["pid", "tid"], maintain_order=True):
        starts = grp.get_column("ts").to_numpy()
        ends = starts + grp.get_column("dur").to_numpy()
        segments[thread] = _innermost_segments(grp.get_column("rid").cast(pl.Int64).to_numpy(), starts, ends)
    return segments


def _threads(ops: pl.DataFrame) -> Iterator[tuple[tuple, pl.DataFrame]]:
    """The op times of each (pid, tid) with a start; nearly always one thread, taken without grouping."""
    if any(ops.get_column(c).null_count() for c in ("pid", "tid", "ts")):
        ops = ops.drop_nulls(["pid", "tid", "ts"])
    if ops.height == 0:
        return
    pid, tid = ops.get_column("pid"), ops.get_column("tid")
    if pid.min() == pid.max() and tid.min() == tid.max():
        yield (pid[0], tid[0]), ops
    else:
        yield from ops.partition_by(["pid", "tid"], as_dict=True).items()


def _innermost_segments(rids: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Split a thread's time at every region boundary; each piece [b, next b) gets the innermost region
    covering it (latest start, then earliest end, then highest rid), or -1. Regions cover the closed
    interval [ts, ts + dur]. Returns (the sorted piece starts b, their regions). O(R log R)."""
    import heapq

    disjoint = _disjoint_segments(rids, starts, ends)
    if disjoint is not None:
        return disjoint

    rids, starts, ends = rids.tolist(), starts.tolist(), ends.tolist()
    opens = sorted(range(len(rids)), key=lambda i: starts[i])
    closes = sorted(range(len(rids)), key=lambda i: ends[i] + 1)
    bounds = sorted({starts[i] for i in opens} | {ends[i] + 1 for i in opens})
    heap: list = []
    closed: set = set()
    owners = []
    oi = ci = 0
    for b in bounds:
        while ci < len(closes) and ends[closes[ci]] + 1 <= b:
            closed.add(closes[ci])
            ci += 1
        while oi < len(opens) and starts[opens[oi]] <= b:
            i = opens[oi]
            if ends[i] + 1 > b:
                heapq.heappush(heap, (-starts[i], ends[i], -rids[i], i))
            oi += 1
        while heap and heap[0][3] in closed:
            heapq.heappop(heap)
        owners.append(rids[heap[0][3]] if heap else -1)
    return np.array(bounds, dtype=np.int64), np.array(owners, dtype=np.int64)


def _disjoint_segments(rids: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """_innermost_segments when no two regions overlap (steps one after another): each covers itself,
    gaps belong to none (a gap that ends where the next region starts is no segment). None otherwise."""
    order = np.lexsort((-ends, starts))  # stable, as sorted() by (start, -end)
    s, e = starts[order], ends[order]
    if not (s[1:] > e[:-1]).all() or (e < s).any():
        return None
    bounds = np.empty(2 * len(s), dtype=np.int64)
    bounds[0::2], bounds[1::2] = s, e + 1
    owners = np.full(len(bounds), -1, dtype=np.int64)
    owners[0::2] = rids[order]
    keep = np.ones(len(bounds), dtype=bool)
    keep[1:-1:2] = s[1:] != e[:-1] + 1
    return bounds[keep], owners[keep]


def _compile_unions(f: pl.DataFrame) -> pl.DataFrame:
    """Per (trace_file, pid, compile_id): the length of the union of compile-phase intervals."""
    keys = ["trace_file", "pid", "compile_id"]
    c = (
        f.filter(pl.col("cat") == COMPILE_CAT)
        .select(pl.col("trace_file").cast(pl.String), "pid", pl.col("compile_id").cast(pl.String), "ts", "dur")
        .filter(pl.col("ts").is_not_null())
        .sort(keys + ["ts"], nulls_last=True)
    )
    if c.height == 0:
        return pl.DataFrame(schema={"trace_file": pl.String, "pid": pl.Int64, "compile_id": pl.String, "union_us": pl.Int64})
    c = c.with_columns((pl.col("ts") + pl.col("dur")).alias("end"))
    c = c.with_columns(pl.col("end").cum_max().shift(1).over(keys).alias("prev"))
    c = c.with_columns((pl.col("prev").is_null() | (pl.col("ts") > pl.col("prev"))).cast(pl.Int64).cum_sum().over(keys).alias("seg"))
    segs = c.group_by(keys + ["seg"]).agg(pl.col("ts").min().alias("a"), pl.col("end").max().alias("b"))
    return segs.group_by(keys).agg((pl.col("b") - pl.col("a")).sum().alias("union_us"))


def _process_partial(others, hist, graphs, unions) -> pl.DataFrame:
    keys = ["trace_file", "pid"]

    def k(df):
        return df.with_columns(pl.col("trace_file").cast(pl.String))

    def ident(events: pl.Expr, op_us: pl.Expr) -> list[pl.Expr]:
        return [
            events.cast(pl.Int64).alias("events"),
            op_us.cast(pl.Int64).alias("op_us"),
            pl.col("host").cast(pl.String).drop_nulls().min().alias("host"),
            pl.col("rank").cast(pl.Int64).drop_nulls().min().alias("rank"),
            pl.col("world_size").cast(pl.Int64).drop_nulls().min().alias("world_size"),
        ]

    from_ops = k(hist).group_by(keys).agg(ident(pl.col("n").sum(), (pl.col("n") * pl.col("dur")).sum()))
    from_rest = k(others).group_by(keys).agg(ident(pl.len(), pl.lit(0)))
    base = pl.concat([from_ops, from_rest], how="vertical_relaxed").group_by(keys).agg(
        pl.col("events").sum(),
        pl.col("op_us").sum(),
        pl.col("host").drop_nulls().min(),
        pl.col("rank").drop_nulls().min(),
        pl.col("world_size").drop_nulls().min(),
    )
    g = k(graphs).group_by(keys).agg(pl.col("dur").sum().alias("graph_us"), pl.len().alias("graph_n"))
    cu = unions.group_by(keys).agg(pl.col("union_us").sum().alias("compile_us"))
    t = base.join(g, on=keys, how="left").join(cu, on=keys, how="left")
    t = t.with_columns(
        pl.col("compile_us").fill_null(0),
        pl.when(pl.col("graph_n").fill_null(0) > 0).then(pl.col("graph_us")).otherwise(pl.col("op_us")).alias("run_us"),
    )
    return _sum_by(_conform("process", t), _KEYS["process"])


# ----------------------------------------------------------------------------------------------
# merge


def merge(partials: Iterable[Partial]) -> Partial:
    """Combine partials of disjoint sets of processes (files)."""
    partials = list(partials)
    tables = {}
    for name, keys in _KEYS.items():
        parts = [getattr(p, name) for p in partials]
        parts = [p for p in parts if p.height] or [pl.DataFrame(schema=_SCHEMAS[name])]
        tables[name] = _sum_by(pl.concat(parts, how="vertical_relaxed"), keys)
    meta = {"file_names": [], "events": 0, "ops": 0, "ts_min": None, "end_max": None, "dropped_lines": 0, "dropped_events": 0, "warnings": []}
    for p in partials:
        m = p.meta
        meta["file_names"] = sorted(set(meta["file_names"]) | set(m.get("file_names", [])))
        for c in ("events", "ops", "dropped_lines", "dropped_events"):
            meta[c] += m.get(c, 0)
        meta["warnings"] += m.get("warnings", [])
        if m.get("ts_min") is not None:
            meta["ts_min"] = m["ts_min"] if meta["ts_min"] is None else min(meta["ts_min"], m["ts_min"])
        if m.get("end_max") is not None:
            meta["end_max"] = m["end_max"] if meta["end_max"] is None else max(meta["end_max"], m["end_max"])
    return Partial(meta=meta, **tables)


# ----------------------------------------------------------------------------------------------
# finish


def _share(col: str = "total_us") -> pl.Expr:
    total = pl.col(col).sum()
    return pl.when(total > 0).then(pl.col(col) / total).otherwise(0.0).alias("share")


def finish(p: Partial, top: int = 20) -> Summary:
    """Turn merged partials into the Summary tables (deterministic row order)."""
    by_op = _by_op(p.op_hist)
    lay = p.layer
    by_layer = (
        lay.group_by(["layer", "module_type"])
        .agg(
            pl.col("count").sum(),
            pl.col("total_us").sum(),
            pl.col("total_us").filter(pl.col("phase") == "forward").sum().alias("forward_us"),
            pl.col("total_us").filter(pl.col("phase") == "backward").sum().alias("backward_us"),
            pl.col("total_us").filter(pl.col("phase") == "inference").sum().alias("inference_us"),
        )
        .with_columns(_share())
        .sort(["total_us", "layer", "module_type"], descending=[True, False, False], nulls_last=True)
        .select("layer", "module_type", "count", "total_us", "forward_us", "backward_us", "share", "inference_us")
    )
    by_phase = (
        lay.group_by("phase")
        .agg(pl.col("count").sum(), pl.col("total_us").sum())
        .with_columns(_share())
        .sort(["total_us", "phase"], descending=[True, False], nulls_last=True)
    )
    by_graph = (
        p.graph.filter((pl.col("calls") > 0) | pl.col("graph").is_not_null())
        .with_columns(
            pl.when(pl.col("calls") > 0).then(pl.col("ops") / pl.col("calls")).otherwise(None).alias("ops_per_call"),
            pl.when(pl.col("calls") > 0).then(pl.col("total_us") / pl.col("calls")).otherwise(None).alias("mean_call_us"),
        )
        .sort(["total_us", "compile_id", "graph", "phase"], descending=[True, False, False, False], nulls_last=True)
        .select("compile_id", "graph", "phase", "calls", "ops_per_call", "total_us", "mean_call_us", "ops")
    )
    by_step = p.step.sort(["epoch", "step"], nulls_last=False).select(
        "epoch", "step", "total_us", "op_us", "op_count", "regions"
    )
    by_process = p.process.sort(["rank", "host", "pid"], nulls_last=True).select(
        "pid", "host", "rank", "events", "op_us", "compile_us", "world_size", "run_us"
    )
    compile_rows = sorted(p.compile.iter_rows(), key=lambda r: _natural(r[0]))
    run_us = int(p.process.get_column("run_us").sum() or 0)
    compile_us = sum(int(r[1] or 0) for r in compile_rows)
    grand = compile_us + run_us
    cvr = pl.DataFrame(
        {
            "kind": ["compile"] * len(compile_rows) + ["run"],
            "compile_id": [r[0] for r in compile_rows] + [None],
            "total_us": [int(r[1] or 0) for r in compile_rows] + [run_us],
        },
        schema={"kind": pl.String, "compile_id": pl.String, "total_us": pl.Int64},
    ).with_columns((pl.col("total_us") / grand if grand else pl.lit(0.0)).alias("share"))
    m = p.meta
    span = (m["end_max"] - m["ts_min"]) if m.get("ts_min") is not None and m.get("end_max") is not None else 0
    meta = {
        "files": list(m.get("file_names", [])),
        "events": m.get("events", 0),
        "ops": m.get("ops", 0),
        "span_us": int(span),
        "compile_us": compile_us,
        "run_us": run_us,
        "dropped_lines": m.get("dropped_lines", 0),
        "dropped_events": m.get("dropped_events", 0),
        "warnings": list(m.get("warnings", [])),
    }
    return Summary(
        by_op=by_op,
        by_layer=by_layer,
        by_phase=by_phase,
        by_graph=by_graph,
        by_step=by_step,
        by_process=by_process,
        compile_vs_run=cvr,
        top=top,
        meta=meta,
        top_ops=by_op.head(top),
    )


def _by_op(h: pl.DataFrame) -> pl.DataFrame:
    keys = ["name", "cat"]
    if h.height == 0:
        return pl.DataFrame(
            schema={"name": pl.String, "cat": pl.String, "count": pl.Int64, "total_us": pl.Int64, "mean_us": pl.Float64,
                    "p50_us": pl.Int64, "p95_us": pl.Int64, "share": pl.Float64, "min_us": pl.Int64, "max_us": pl.Int64}
        )  # fmt: skip
    h = h.sort(keys + ["dur"], nulls_last=True).with_columns(
        pl.col("n").sum().over(keys).alias("cnt"), pl.col("n").cum_sum().over(keys).alias("cum")
    )
    out = h.group_by(keys).agg(
        pl.col("n").sum().alias("count"),
        (pl.col("n") * pl.col("dur")).sum().alias("total_us"),
        pl.col("dur").filter(pl.col("cum") * 100 >= pl.col("cnt") * 50).min().alias("p50_us"),
        pl.col("dur").filter(pl.col("cum") * 100 >= pl.col("cnt") * 95).min().alias("p95_us"),
        pl.col("dur").min().alias("min_us"),
        pl.col("dur").max().alias("max_us"),
    )
    return (
        out.with_columns((pl.col("total_us") / pl.col("count")).alias("mean_us"), _share())
        .sort(["total_us", "name", "cat"], descending=[True, False, False], nulls_last=True)
        .select("name", "cat", "count", "total_us", "mean_us", "p50_us", "p95_us", "share", "min_us", "max_us")
    )


def _natural(s):
    if s is None:
        return (1, ())
    parts = []
    for tok in str(s).replace("/", " / ").split():
        parts.append((0, int(tok), "") if tok.isdigit() else (1, 0, tok))
    return (0, tuple(parts))


def frame_with_info(frame: pl.DataFrame, info: ReadInfo) -> pl.DataFrame:
    """Attach a ReadInfo to a frame so that `summarize(frame)` reports its dropped lines and warnings."""
    try:
        frame._dynascope_info = info  # type: ignore[attr-defined]
    except AttributeError:  # pragma: no cover
        pass
    return frame


