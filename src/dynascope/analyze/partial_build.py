"""Building one file's Partial (analyze/partial.py, the contract): the op histogram (OpReducer), the core
tables, steps, processes and ranks, collectives' sequence, and compile time charged to compile ids.

Three ways build one file's Partial, all to the same numbers: `partial(frame)` from rows,
`general_file_partial(path)` from the general reader with op events reduced per chunk (`OpReducer`),
and `fastpath.file_partial(path)` from the byte scanner, which fills an `OpReducer` too.
"""

from __future__ import annotations

import heapq
import itertools
import os
from typing import cast

import numpy as np
import polars as pl

from dynascope.analyze import breaks, comm, gpu, memory
from dynascope.analyze.files import file_table
from dynascope.analyze.partial import (
    _KEYS,
    KERNEL_FIELDS,
    SUMMARY_COLUMNS,
    Partial,
    PartialMeta,
    _conform,
    _empty,
    _ensure,
    _str_keys,
    _sum_by,
    _sum_or_unknown,
)
from dynascope.analyze.read.columns import COMPILE_CAT, GRAPH_CAT, OP_CAT
from dynascope.analyze.read.reader import FileReader, ReadInfo, read_file_reduced
from dynascope.analyze.read.resolve import graph_refs, norm_hash
from dynascope.analyze.stepparts import (
    COMM_NUMBER_COLUMNS,
    LIST_COLUMNS,
    PART_COLUMNS,
    op_windows,
    step_parts,
    step_sources,
    step_windows,
)  # fmt: skip
from dynascope.analyze.steps import TIME_COLUMNS, ops_per_region
from dynascope.trace.format import COMM_CAT

__all__ = ["OpReducer", "charge_compile_time", "general_file_partial", "partial", "partial_of_file"]


def general_file_partial(path: str | os.PathLike) -> Partial:
    """Read one file (only the columns summaries need) and pre-aggregate it, with the general reader.

    Op events are aggregated chunk by chunk as they are parsed (a histogram over their raw keys and
    a compact copy of their times), so the file is never held as rows; the histogram is resolved
    through the file's OH/HH records at the end. Same numbers as `partial(read_file(path)[0])`.
    """
    reducer = OpReducer()
    others, info, reader = read_file_reduced(path, columns=SUMMARY_COLUMNS, reducer=reducer)
    return partial_of_file(reducer, others, info, reader)


def partial_of_file(reducer: OpReducer, others: pl.DataFrame, info: ReadInfo, reader: FileReader) -> Partial:
    """One file's Partial from the op events its reducer took and the rows it left (`others`)."""
    hist, times = reducer.result(reader)
    return _core(hist, times, _ensure(others), info)


# raw columns (before resolution) that op events are grouped by per chunk (the OH reference `op` stands
# for every attribution field, KERNEL_FIELDS included)
_RAW_OP_KEYS = [
    "pid", "hhash", "op", "name", "cat", "dur", "phase", "layer", "module_type", "compile_id", "graph", "host",
    "rank", "world_size",
]


class OpReducer:
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
        tcols = [
            pl.col(c) if c in frame.columns else pl.lit(None, dtype=pl.Int64).alias(c)
            for c in ("pid", "tid", "ts", "dur")
        ]
        hist, times = pl.collect_all([ops.group_by(keys).agg(pl.len().cast(pl.Int64).alias("n")), ops.select(tcols)])
        self.hists.append(hist)
        self.times.append(times)
        return frame.clear() if only_ops else frame.filter(~is_op)

    def add_taken(self, hist: pl.DataFrame, times: pl.DataFrame) -> None:
        """Op events taken by another parser (the fast path's scanner), in this reducer's shape."""
        self.hists.append(hist)
        self.times.append(times)

    def result(self, reader: FileReader) -> tuple[pl.DataFrame, pl.DataFrame]:
        """The file's op histogram (_OP_KEYS + n) and its op times (TIME_COLUMNS), resolved through
        the reader's metadata."""
        if not self.hists:
            hist = pl.DataFrame(
                schema={c: (pl.Int64 if c in ("pid", "dur", "rank", "world_size") else pl.String) for c in _OP_KEYS}
                | {"n": pl.Int64}
            )
            return hist, pl.DataFrame(schema=dict.fromkeys(TIME_COLUMNS, pl.Int64))
        raw = pl.concat(self.hists, how="diagonal_relaxed")
        if "__k" in raw.columns:
            pend = raw.filter(pl.col("__pend").is_not_null())
            if pend.height:  # ops whose graph call came later in the file
                done = raw.filter(pl.col("__pend").is_null())
                pend = pend.drop("__gop").join(
                    self._graph_map().rename({"p_idx": "__pend"}), on=["pid", "__pend"], how="left"
                )
                raw = pl.concat([done, pend.select(done.columns)], how="vertical_relaxed")
            raw = raw.join(reader.index_table(), on=["__gop", "__k"], how="left")
            if "op" in raw.columns:
                raw = raw.with_columns(pl.coalesce(norm_hash("op", raw), pl.col("__ref")).alias("op"))
            else:
                raw = raw.rename({"__ref": "op"})
            raw = raw.drop([c for c in ("__gop", "__k", "__pend", "__ref") if c in raw.columns])
        keys = [c for c in _RAW_OP_KEYS if c in raw.columns]
        raw = raw.group_by(keys).agg(pl.col("n").sum())
        resolved = reader.resolve_frame(raw, SUMMARY_COLUMNS)
        cols = []
        for c in _OP_KEYS:
            if c in resolved.columns:
                cols.append(pl.col(c))
            else:
                cols.append(
                    pl.lit(None, dtype=pl.Int64 if c in ("pid", "dur", "rank", "world_size") else pl.String).alias(c)
                )
        hist = _str_keys(resolved.select(*cols, "n")).group_by(_OP_KEYS).agg(pl.col("n").sum())
        times = pl.concat(self.times, how="vertical_relaxed").select(pl.col(c).cast(pl.Int64) for c in TIME_COLUMNS)
        return hist, times


# ----------------------------------------------------------------------------------------------
# partial


# op events are pre-aggregated to a weighted histogram over these keys (n = how many events)
_OP_KEYS = [
    "trace_file", "pid", "host", "rank", "world_size", "name", "cat", "phase", "layer", "module_type",
    "compile_id", "graph", "dur", *KERNEL_FIELDS,
]  # fmt: skip


def partial(frame: pl.DataFrame, info: ReadInfo | None = None) -> Partial:
    """Pre-aggregate a frame (any subset of events, as long as each process's events are all in it).

    Without `info`, the writers' dropped-event counts come from the frame's own `end` rows."""
    if info is None:
        info = ReadInfo(dropped_events=_dropped_in_end_rows(frame))
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
    # op times are needed only where there are steps, and one file at a time bounds the memory
    found = step_sources(others)
    steps = []
    for name in found.get_column("trace_file").cast(pl.String).unique().sort().to_list():
        times = lf.filter(is_op & (pl.col("trace_file").cast(pl.String) == name)).select(TIME_COLUMNS).collect()
        steps.append(_step_partial(others.filter(pl.col("trace_file").cast(pl.String) == name), times))
    step = _sum_by(pl.concat(steps), _KEYS["step"]) if steps else _empty("step")
    return _core(hist, None, others, info, step=step, op_span=span.row(0))



def _untraced_graphs(others: pl.DataFrame) -> dict[str, int]:
    """How many graphs ran untraced (capture/untraced.py records each one's forward, backward or whole
    graph as a "dynascope" event named "untraced ..."), by reason."""
    is_untraced = pl.col("name").cast(pl.String).str.starts_with("untraced ")
    untraced = (pl.col("cat").cast(pl.String) == "dynascope") & is_untraced
    rows = others.filter(untraced.fill_null(False))
    if rows.height == 0:
        return {}
    counts = rows.group_by(pl.col("reason").cast(pl.String).fill_null("no reason recorded")).agg(
        pl.struct("trace_file", "pid", "compile_id", "graph").n_unique().alias("n")
    )
    return dict(counts.iter_rows())


def _dropped_in_end_rows(frame: pl.DataFrame) -> int:
    if not {"name", "cat", "dropped"} <= set(frame.columns) or not frame.schema["dropped"].is_integer():
        return 0
    end = (pl.col("cat").cast(pl.String) == "dftracer") & (pl.col("name").cast(pl.String) == "end")
    return int(frame.filter(end).get_column("dropped").sum() or 0)


def _core(
    hist: pl.DataFrame,
    times: pl.DataFrame | None,
    others: pl.DataFrame,
    info: ReadInfo | None,
    step: pl.DataFrame | None = None,
    op_span: tuple | None = None,
) -> Partial:
    """The partial of one file from op events as a weighted histogram (`hist`: _OP_KEYS + n), their
    times (TIME_COLUMNS) and every other event as rows (`others`). A caller that computed
    the step table and the ops' (min ts, max end) itself passes them instead of `times`."""
    hist = _str_keys(hist)
    samples, others = memory.split_samples(others)  # memory samples are no events: only the memory tables read them
    graphs = others.filter(pl.col("cat") == GRAPH_CAT)
    weighted = pl.col("n") * pl.col("dur")

    op_hist = hist.group_by(["name", "cat", "dur"]).agg(pl.col("n").sum())
    kernel = hist.filter(pl.col("kernel_kind").is_not_null()).group_by(_KEYS["kernel"]).agg(pl.col("n").sum())
    layer = hist.group_by(["layer", "module_type", "phase"]).agg(
        pl.col("n").sum().alias("count"), weighted.sum().alias("total_us")
    )
    g_calls = graphs.group_by(["compile_id", "graph", "phase"]).agg(
        pl.len().cast(pl.Int64).alias("calls"),
        pl.col("dur").sum().alias("total_us"),
        pl.lit(0, dtype=pl.Int64).alias("ops"),
    )
    g_ops = hist.group_by(["compile_id", "graph", "phase"]).agg(
        pl.lit(0, dtype=pl.Int64).alias("calls"),
        pl.lit(0, dtype=pl.Int64).alias("total_us"),
        pl.col("n").sum().alias("ops"),
    )
    graph = _sum_by(pl.concat([_conform("graph", g_calls), _conform("graph", g_ops)]), _KEYS["graph"])

    if step is None or op_span is None:
        if times is None:
            raise ValueError("_core needs the op times unless the caller passes both step and op_span")
        if step is None:
            step = _step_partial(others, times)
        if op_span is None:
            ends = times.select(pl.col("ts").min().alias("a"), (pl.col("ts") + pl.col("dur")).max().alias("b"))
            op_span = ends.row(0)
    compile_unions = _compile_unions(others)
    process = _process_partial(others, hist, graphs, compile_unions)
    compile_tbl = _sum_by(
        _conform("compile", compile_unions.group_by("compile_id").agg(pl.col("union_us").sum().alias("total_us"))),
        ["compile_id"],
    )

    n_ops = int(hist.get_column("n").sum() or 0)
    # ts and dur are Int64 columns: their extremes are ints (polars types scalars as any Python literal)
    ts_min = cast("int | None", others.get_column("ts").min())
    end_max = cast("int | None", others.select((pl.col("ts") + pl.col("dur")).max()).item())
    lo = [v for v in (ts_min, op_span[0]) if v is not None]
    hi = [v for v in (end_max, op_span[1]) if v is not None]
    names = set(others.get_column("trace_file").cast(pl.String).unique().drop_nulls().to_list())
    names |= set(hist.get_column("trace_file").unique().drop_nulls().to_list())
    meta = PartialMeta(
        file_names=sorted(names),
        events=others.height + n_ops,
        ops=n_ops,
        ts_min=min(lo) if lo else None,
        end_max=max(hi) if hi else None,
        untraced=_untraced_graphs(others),
    )
    if info is not None:
        meta.sources = dict(info.sources)
        meta.file_names = sorted(set(meta.file_names) | set(info.files))
        meta.dropped_lines = info.dropped_lines
        meta.dropped_events = info.dropped_events
        meta.warnings = list(info.warnings)
    return Partial(
        op_hist=_conform("op_hist", op_hist),
        kernel=_conform("kernel", kernel),
        layer=_conform("layer", layer),
        graph=graph,
        step=step,
        process=process,
        compile=compile_tbl,
        file=file_table(others),
        meta=meta,
        gpu=gpu.gpu_partial(others),
        proc_file=_proc_file(others, hist),
        comm_seq=_comm_seq(others),
        **comm.frame_tables(others, hist),
        **breaks.frame_tables(others),
        **memory.frame_tables(others, samples, _rank_of_pid(others),
                              step_windows(others).filter(pl.col("step").is_not_null())),
    )


def _step_partial(f: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """by_step rows from the steps in `f` (user regions, or optimizer steps: stepparts) and the op times
    `ops` (TIME_COLUMNS), both of one file."""
    windows = step_windows(f)
    if windows.height == 0:
        return _empty("step")
    op_us, op_count = ops_per_region(op_windows(windows), ops)
    numbers, listed = step_parts(f, windows, ops)
    windows = windows.join(_rank_of_pid(f), on="pid", how="left")
    keys = ["rank", "epoch", "step"]
    found = pl.concat([windows, numbers], how="horizontal")
    busy = pl.Series("gpu_us", gpu.busy_in_windows(f, windows))
    busy = pl.select(pl.when(pl.Series(gpu.paused_in_windows(f, windows))).then(None).otherwise(busy)).to_series()
    out = (
        found.with_columns(pl.Series("op_us", op_us), pl.Series("op_count", op_count), busy.alias("gpu_us"))
        .group_by(keys)
        .agg(
            pl.len().cast(pl.Int64).alias("regions"),
            pl.col("dur").sum().alias("total_us"),
            pl.col("op_us").sum(),
            pl.col("op_count").sum(),
            _sum_or_unknown("gpu_us"),
            *(pl.col(c).sum() for c in (*PART_COLUMNS, "compiles", *COMM_NUMBER_COLUMNS)),
        )
    )
    # the names (compile ids, files) of each window, as list columns of its (epoch, step)
    none = pl.lit([], dtype=pl.List(pl.String))
    if listed.height == 0:
        return _conform("step", out.with_columns(none.alias(c) for c in LIST_COLUMNS))
    step_of = windows.select(keys).with_row_index("row").with_columns(pl.col("row").cast(pl.Int64))
    items = listed.join(step_of, on="row").group_by([*keys, "column"]).agg(pl.col("item").unique().sort())
    for c in LIST_COLUMNS:
        one = items.filter(pl.col("column") == c).select(*keys, pl.col("item").alias(c))
        out = out.join(one, on=keys, how="left", nulls_equal=True).with_columns(pl.col(c).fill_null(none))
    return _conform("step", out)



def _rank_expr() -> pl.Expr:
    """A process's rank; null where it has none (a single process's header says -1)."""
    r = pl.col("rank").cast(pl.Int64)
    return pl.when(r >= 0).then(r).otherwise(None)


def _rank_of_pid(f: pl.DataFrame) -> pl.DataFrame:
    """pid -> rank (null: not a rank) of the processes of one file's rows."""
    return (
        f.select(pl.col("pid").cast(pl.Int64), _rank_expr().alias("rank"))
        .group_by("pid")
        .agg(pl.col("rank").drop_nulls().min())
    )


def _proc_file(others: pl.DataFrame, hist: pl.DataFrame) -> pl.DataFrame:
    """Per (trace_file, pid): rank, host, how the file ended ("complete"; "cut by SIGTERM": the writer's cut
    record; "no end record": SIGKILL or a crash), its events and the compile ids it began."""
    keys = ["trace_file", "pid"]

    def ident(df: pl.DataFrame, events: pl.Expr) -> pl.DataFrame:
        return df.group_by(pl.col("trace_file").cast(pl.String), pl.col("pid").cast(pl.Int64)).agg(
            events.cast(pl.Int64).alias("events"),
            _rank_expr().drop_nulls().min().alias("rank"),
            pl.col("host").cast(pl.String).drop_nulls().min().alias("host"),
        )

    base = pl.concat([ident(hist, pl.col("n").sum()), ident(others, pl.len())], how="vertical_relaxed")
    base = base.group_by(keys).agg(
        pl.col("events").sum(), pl.col("rank").drop_nulls().min(), pl.col("host").drop_nulls().min()
    )
    if base.height == 0:
        return _empty("proc_file")
    name, cat = pl.col("name").cast(pl.String), pl.col("cat").cast(pl.String)
    marks = others.filter((cat == "dftracer") & name.is_in(["end", "cut"])).select(
        pl.col("trace_file").cast(pl.String), pl.col("pid").cast(pl.Int64), name.alias("mark"),
        pl.col("signal").cast(pl.String),
    )  # fmt: skip
    ended = marks.group_by(keys).agg(
        (pl.col("mark") == "end").any().alias("ended"),
        pl.col("signal").filter(pl.col("mark") == "cut").drop_nulls().first().alias("signal"),
        (pl.col("mark") == "cut").any().alias("was_cut"),
    )
    compiles = others.filter((cat == COMPILE_CAT) & pl.col("compile_id").is_not_null()).select(
        pl.col("trace_file").cast(pl.String), pl.col("pid").cast(pl.Int64),
        pl.col("compile_id").cast(pl.String).str.strip_chars().alias("cid"),
    ).filter(~pl.col("cid").is_in(list(NO_COMPILE_ID)))  # fmt: skip
    ids = compiles.group_by(keys).agg(pl.col("cid").unique().sort().alias("compile_ids"))
    t = base.join(ended, on=keys, how="left").join(ids, on=keys, how="left")
    status = (
        pl.when(pl.col("was_cut").fill_null(False))
        .then(pl.lit("cut by ") + pl.col("signal").fill_null("a signal"))
        .when(pl.col("ended").fill_null(False))
        .then(pl.lit("complete"))
        .otherwise(pl.lit("no end record"))
    )
    t = t.with_columns(status.alias("status"), pl.col("compile_ids").fill_null(pl.lit([], dtype=pl.List(pl.String))))
    return _sum_by(_conform("proc_file", t), _KEYS["proc_file"])


COMM_KEPT = 20_000  # collectives kept per (rank, process group): the first ones, where ranks part ways


def _comm_seq(others: pl.DataFrame) -> pl.DataFrame:
    """Per rank and process group: the collectives issued (docs/trace-format.md, collective events), each
    once (its issue marker or its complete event), keyed by the group's sequence number (else the issue
    order within the group), with its operation, bytes and the step it was issued in (null: none)."""
    cat = pl.col("cat").cast(pl.String)
    if not (others.get_column("cat").cast(pl.String) == COMM_CAT).any():
        return _empty("comm_seq")
    c = others.filter((cat == COMM_CAT) & pl.col("ts").is_not_null()).with_columns(
        pl.col("pid").cast(pl.Int64), pl.col("pg").cast(pl.String).fill_null("?"),
        pl.col("seq").cast(pl.Int64).fill_null(-1), pl.col("ts").cast(pl.Int64),
    )  # fmt: skip
    ranks = _rank_of_pid(others)
    c = c.join(ranks, on="pid", how="left")
    # one row per collective: the issue marker where there is one, else the complete event
    issued = (pl.col("state").cast(pl.String) == "issued").fill_null(False)
    c = c.with_columns(issued.alias("__issued")).sort(["pid", "pg", "ts"])
    known = c.filter(pl.col("seq") >= 0).sort("__issued", descending=True).unique(
        ["rank", "pid", "pg", "seq"], keep="first", maintain_order=True
    )
    order = c.filter(pl.col("seq") < 0)
    if order.height:  # no sequence number: the issue order of the markers (else of the events) per group
        has_marker = order.group_by("pid", "pg").agg(pl.col("__issued").any().alias("__m"))
        order = order.join(has_marker, on=["pid", "pg"]).filter(pl.col("__issued") == pl.col("__m")).drop("__m")
        order = order.sort("ts").with_columns(pl.int_range(pl.len()).over(["pid", "pg"]).cast(pl.Int64).alias("seq"))
    rows = pl.concat([known, order], how="diagonal_relaxed").sort("ts")
    rows = rows.with_columns(_step_at(others, rows).alias("step"))
    out = rows.select(
        "rank", "pg", "seq", pl.col("name").cast(pl.String).alias("op"), pl.col("bytes").cast(pl.Int64).fill_null(0),
        "step", pl.lit(1, dtype=pl.Int64).alias("n"),
    ).filter(pl.int_range(pl.len()).over(["rank", "pg"]) < COMM_KEPT)  # fmt: skip
    return _sum_by(_conform("comm_seq", out), _KEYS["comm_seq"])


def _step_at(others: pl.DataFrame, rows: pl.DataFrame) -> pl.Series:
    """The step each row's `ts` falls in, on its process (any thread of it); null outside every step."""
    out = np.full(rows.height, -1, dtype=np.int64)
    windows = step_windows(others).filter(pl.col("step").is_not_null())
    if windows.height and rows.height:
        pid, ts = rows.get_column("pid").to_numpy(), rows.get_column("ts").to_numpy()
        for (p,), w in windows.sort("ts").partition_by("pid", as_dict=True).items():
            a = w.get_column("ts").to_numpy()
            b = a + w.get_column("dur").fill_null(0).to_numpy()
            mine = np.flatnonzero(pid == p)
            k = np.searchsorted(a, ts[mine], side="right") - 1
            inside = (k >= 0) & (ts[mine] < b[np.maximum(k, 0)])
            out[mine[inside]] = w.get_column("step").to_numpy()[k[inside]]
    return pl.Series(out).replace(-1, None)


def _compile_unions(f: pl.DataFrame) -> pl.DataFrame:
    """Per (trace_file, pid, compile_id): the compile time charged to that compile id, such that the rows
    of a process add up exactly to the wall-clock union of its compile intervals on every thread.

    Each instant of that union is charged to exactly one compile id (`charge_compile_time`): the compile
    open then that started last (so overlapping compiles, on one thread or several, count each instant
    once); an instant covered only by events without a compile id (inductor's compile worker threads,
    serving the compile the main thread waits in; older traces wrote their id as the string "None") goes
    to the compile open at that moment on another thread, else to the latest compile started before it.
    A row without a compile id is left only for a process whose compile events carry no id at all."""
    schema = pl.Schema({"trace_file": pl.String, "pid": pl.Int64, "compile_id": pl.String, "union_us": pl.Int64})
    cid = pl.col("compile_id").cast(pl.String).str.strip_chars()
    c = (
        f.filter(pl.col("cat") == COMPILE_CAT)
        .filter(pl.col("ts").is_not_null() & (pl.col("dur").fill_null(0) > 0))
        .select(
            pl.col("trace_file").cast(pl.String), pl.col("pid").cast(pl.Int64),
            pl.when(cid.is_in(list(NO_COMPILE_ID))).then(None).otherwise(cid).alias("compile_id"),
            pl.col("ts").cast(pl.Int64), (pl.col("ts") + pl.col("dur")).cast(pl.Int64).alias("end"),
        )
    )  # fmt: skip
    if c.height == 0:
        return pl.DataFrame(schema=schema)
    rows: list[tuple] = []
    for (name, pid), g in c.group_by(["trace_file", "pid"], maintain_order=True):
        charged = charge_compile_time(g.get_column("ts").to_list(), g.get_column("end").to_list(),
                                      g.get_column("compile_id").to_list())  # fmt: skip
        rows += [(name, pid, k, us) for k, us in charged.items()]
    return pl.DataFrame(rows, schema=schema, orient="row")


# compile ids that name no compile: torch writes str(None) where a thread has no compile context
NO_COMPILE_ID = ("", "None", "null")


def charge_compile_time(starts: list[int], ends: list[int], ids: list[str | None]) -> dict[str | None, int]:
    """The union of the intervals [starts[i], ends[i]) charged to compile ids: {id: length}, the lengths
    adding up to the union's. An instant goes to the id of the covering interval with a compile id that
    started last; an instant covered only by intervals without one (None) to the id that started last
    before it, else (none before) to the first id after it; None keeps its time only where no interval has
    an id. Touching intervals do not overlap."""
    order = sorted(range(len(starts)), key=lambda i: (starts[i], -ends[i]))  # an inner interval after its outer one
    points = sorted(set(starts) | set(ends))
    out: dict[str | None, int] = {}
    open_ids: list[tuple[int, int, int]] = []  # max-heap by start: (-start, -order, end)
    anon_ends: list[int] = []  # min-heap of the ends of open intervals without an id
    latest: str | None = None  # the id of the interval with an id that started last so far
    before_any = 0  # id-less time before the first interval with an id
    k = 0
    for a, b in itertools.pairwise(points):
        while k < len(order) and starts[order[k]] <= a:
            i = order[k]
            if ids[i] is None:
                heapq.heappush(anon_ends, ends[i])
            else:
                heapq.heappush(open_ids, (-starts[i], -k, i))
                latest = ids[i]
            k += 1
        while open_ids and ends[open_ids[0][2]] <= a:
            heapq.heappop(open_ids)
        while anon_ends and anon_ends[0] <= a:
            heapq.heappop(anon_ends)
        if open_ids:
            who = ids[open_ids[0][2]]
        elif anon_ends:
            who = latest
            if who is None:
                before_any += b - a
                continue
        else:
            continue
        out[who] = out.get(who, 0) + b - a
    if before_any:
        first = next((ids[i] for i in order if ids[i] is not None), None)
        out[first] = out.get(first, 0) + before_any
    return out


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
