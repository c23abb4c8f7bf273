"""Collectives across ranks: joined by (process group, sequence number), stragglers, hangs, clock alignment.

Per file (inside one (trace_file, pid) group, as every partial computation; `frame_tables`):

- `comm`: one row per collective a process issued (docs/trace-format.md, "Collectives"): its complete
  event (issue `ts`, completion `ts + dur`) or, where it never completed, its issue marker (`state`
  "issued", completion null); the step it was issued in; and what its thread did between the process's
  previous collective's issue and this one's (`gap_<what>_us`, painted by priority: compile > I/O > data >
  gc > compute (graph calls) > waiting in earlier collectives > backward outside graphs > optimizer >
  Python / untraced, the rest).
- `comm_proc`: per process: rank, host, how its file ended (an `end` record, a `cut` record and its
  signal, `pending` and `open`), its last step and its last events: what a hang report says of a rank.

Functional collectives (`_c10d_functional` ops in compiled graphs) are op events whose attribution carries
`comm_op`, `comm_pg`, `comm_bytes`, `comm_key`; `functional_collectives` pairs the n-th collective op of a
`comm_key` on a thread with the n-th `wait_tensor` of that key there (a key is one node of one graph, so
this is the wait in the same graph call; issue = the collective op's start, completion = the wait's end)
and numbers them per (process, group) in issue order: seq = its place in the group's order on that rank,
the same on every rank that runs the same graphs in the same order (they are not counted in the group's
own sequence numbers, so their `pg` is the group name + "/functional").

Job-wide (`finish_tables`, after merging):

- `clocks`: per rank its clock offset. Ranks on one host share its clock (offset 0). For another host,
  the offset against the reference host (rank 0's) is the median, over the symmetric collectives
  (all_reduce, all_gather, reduce_scatter, barrier, all_to_all) completed on both hosts, of the median
  completion time on that host minus the median on the reference host: such a collective completes on
  every rank at nearly the same moment. `residual_us` is the median absolute deviation of those
  differences from the offset. Aligned time = a rank's time minus its offset.
- `collectives`: one row per (pg, seq): op, source, bytes, ranks seen, each rank's issue and completion
  (aligned, µs from the job's first event), the last rank to issue it and by how much (its issue minus the
  earliest issue), and whether every rank of the group completed it.
- `stragglers`: per (rank, step) where that rank issued collectives last: the most it was late, and what
  it did instead: the gap part where it spent most more time than the median of the other ranks did
  before the same collectives (`doing_us`: that excess, summed over the step's collectives it was last in,
  at most `late_us`). Most late first.
- `hangs`: where some ranks' files end (cut by a signal, or no `end` record) with collectives issued and
  never completed: per waiting rank the first such collective (op, pg, seq, since when) and per rank of
  its group that never issued it, where that rank was instead (its own pending collective, its open
  regions at the cut, else its last events).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import orjson
import polars as pl

from dynascope.analyze.read.columns import (
    AUTOGRAD_CAT,
    COMPILE_CAT,
    DATA_CAT,
    GRAPH_CAT,
    OPTIMIZER_CAT,
    POSIX_CAT,
    TORCH_IO_CAT,
)
from dynascope.analyze.stepparts import COMM_CAT, interval_union, paint, step_windows

__all__ = [
    "COMM_COLUMNS", "COMM_INT_COLUMNS", "DOING", "KEYS", "SCHEMAS", "finish_tables", "frame_tables",
    "functional_collectives", "hang_lines",
]  # fmt: skip

# the args of collective events and cut records that the summaries read (partial.SUMMARY_COLUMNS)
COMM_COLUMNS = ["pg", "seq", "group_size", "source", "async", "state", "itid", "bucket", "params", "signal",
                "pending", "open"]  # fmt: skip
COMM_INT_COLUMNS = ("seq", "group_size", "async", "itid", "bucket", "params")

# what a rank did before it issued a collective: gap_<what>_us, in painting order; python: the rest
DOING = ("compile", "io", "data", "gc", "compute", "comm", "backward", "optimizer", "python")
DOING_LABELS = {
    "compile": "compile",
    "io": "checkpoint / file I/O",
    "data": "data wait (dataloader)",
    "gc": "garbage collection",
    "compute": "compute (graph calls)",
    "comm": "waiting in earlier collectives",
    "backward": "backward outside compiled graphs",
    "optimizer": "optimizer",
    "python": "Python / untraced",
}
GAP_COLUMNS = tuple(f"gap_{d}_us" for d in DOING)
# collectives whose completion is (nearly) simultaneous on every rank: what clocks are aligned by
SYMMETRIC = ("all_reduce", "all_gather", "reduce_scatter", "barrier", "all_to_all", "allreduce", "allgather")

_COMM_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "trace_file": pl.String, "pid": pl.Int64, "tid": pl.Int64, "rank": pl.Int64, "host": pl.String,
    "pg": pl.String, "seq": pl.Int64, "op": pl.String, "source": pl.String, "bytes": pl.Int64,
    "group_size": pl.Int64, "bucket": pl.Int64, "issue_us": pl.Int64, "done_us": pl.Int64,
    "epoch": pl.Int64, "step": pl.Int64, **dict.fromkeys(GAP_COLUMNS, pl.Int64), "gap_compile_ids": pl.String,
}  # fmt: skip
_PROC_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "trace_file": pl.String, "pid": pl.Int64, "rank": pl.Int64, "host": pl.String, "world_size": pl.Int64,
    "ended": pl.Int64, "cut": pl.String, "open": pl.String, "pending": pl.String, "last_us": pl.Int64,
    "last_events": pl.String, "last_epoch": pl.Int64, "last_step": pl.Int64, "events": pl.Int64,
}  # fmt: skip
SCHEMAS = {"comm": _COMM_SCHEMA, "comm_proc": _PROC_SCHEMA}
# merged as partial tables: every column a key (rows of different files never collide), nothing summed
KEYS = {"comm": list(_COMM_SCHEMA), "comm_proc": list(_PROC_SCHEMA)}


def _empty(name: str) -> pl.DataFrame:
    return pl.DataFrame(schema=SCHEMAS[name])


def _s(c: str) -> pl.Expr:
    return pl.col(c).cast(pl.String)


def _col(f: pl.DataFrame, c: str, dtype) -> pl.Expr:
    return pl.col(c).cast(dtype, strict=False) if c in f.columns else pl.lit(None, dtype=dtype).alias(c)


def _rank(f: pl.DataFrame) -> pl.Expr:
    r = _col(f, "rank", pl.Int64)
    return pl.when(r >= 0).then(r).otherwise(None)


# ----------------------------------------------------------------------------------------------
# per file


# the op names of functional collectives and their waits ("_c10d_functional.all_reduce_.default" and, as
# aot_eager's post-grad graphs name them, "function.all_reduce.default", "function.wait_tensor.default")
FUNCTIONAL_OP = r"c10d_functional\.|wait_tensor|all_reduce|all_gather|reduce_scatter|all_to_all|broadcast"
_FUNCTIONAL_COLUMNS = ["trace_file", "pid", "tid", "ts", "dur", "name", "cat", "comm_op", "comm_pg", "comm_bytes",
                       "comm_key", "rank", "host"]  # fmt: skip


def frame_tables(others: pl.DataFrame, hist: pl.DataFrame | None = None) -> dict[str, pl.DataFrame]:
    """The `comm` and `comm_proc` partial tables of one file's non-op rows; `hist` (the file's op histogram)
    says whether it ran functional collectives, whose op events are then read again with their times."""
    functional = _functional_rows(hist)
    if functional.height:
        others = pl.concat([others, functional], how="diagonal_relaxed")
    if others.height == 0:
        return {"comm": _empty("comm"), "comm_proc": _empty("comm_proc")}
    cats = others.get_column("cat").cast(pl.String)
    has_comm = bool((cats == COMM_CAT).any())
    has_cut = bool(((cats == "dftracer") & (others.get_column("name").cast(pl.String) == "cut")).any())
    rank = others.get_column("rank").cast(pl.Int64, strict=False) if "rank" in others.columns else None
    ranked = rank is not None and bool((rank >= 0).any())
    if not (has_comm or has_cut or ranked):
        return {"comm": _empty("comm"), "comm_proc": _empty("comm_proc")}
    windows = step_windows(others)
    return {"comm": _instances(others, windows), "comm_proc": _processes(others, windows)}


def _functional_rows(hist: pl.DataFrame | None) -> pl.DataFrame:
    """The functional collectives of the files whose op histogram names any, as `comm` rows
    (functional_collectives), read again from those files (only their op events are kept)."""
    if hist is None or hist.height == 0 or "name" not in hist.columns:
        return pl.DataFrame()
    names = hist.get_column("name").cast(pl.String)
    files = hist.filter(names.str.contains(FUNCTIONAL_OP).fill_null(False)).get_column("trace_file")
    out = []
    for path in files.cast(pl.String).drop_nulls().unique().sort().to_list():
        from dynascope.analyze.read.reader import (
            read_file,  # here: the reader imports the partial that imports this module
        )

        try:
            rows, _ = read_file(path, columns=_FUNCTIONAL_COLUMNS)
        except (OSError, ValueError):  # a frame not read from a file (summarize(frame)): nothing to read
            continue
        if "comm_key" not in rows.columns:
            continue
        found = functional_collectives(rows.filter((pl.col("cat").cast(pl.String) == "dynamo").fill_null(False)))
        if found.height:
            out.append(found.with_columns(
                pl.lit(path).alias("trace_file"),
                pl.lit(rows.get_column("host").cast(pl.String).drop_nulls().first(), dtype=pl.String).alias("host"),
            ))  # fmt: skip
    return pl.concat(out, how="diagonal_relaxed") if out else pl.DataFrame()


def _instances(f: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    c = f.filter((_s("cat") == COMM_CAT).fill_null(False) & pl.col("ts").is_not_null())
    if c.height == 0:
        return _empty("comm")
    state = _col(c, "state", pl.String)
    c = c.select(
        _s("trace_file").alias("trace_file"), pl.col("pid").cast(pl.Int64), pl.col("tid").cast(pl.Int64),
        _col(c, "itid", pl.Int64).alias("itid"), _rank(c).alias("rank"), _col(c, "host", pl.String).alias("host"),
        _col(c, "pg", pl.String).fill_null("?").alias("pg"), _col(c, "seq", pl.Int64).fill_null(-1).alias("seq"),
        _s("name").alias("op"), _col(c, "source", pl.String).alias("source"),
        _col(c, "bytes", pl.Int64).alias("bytes"), _col(c, "group_size", pl.Int64).alias("group_size"),
        _col(c, "bucket", pl.Int64).alias("bucket"), pl.col("ts").cast(pl.Int64).alias("issue_us"),
        (pl.col("ts") + pl.col("dur").fill_null(0).clip(lower_bound=0)).cast(pl.Int64).alias("end"),
        (state.fill_null("done") == "issued").alias("marker"),
        (state.fill_null("done") == "error").alias("error"),
    )  # fmt: skip
    key = ["pid", "pg", "seq", "op", "issue_us"]
    done = c.filter(~pl.col("marker"))
    markers = c.filter(pl.col("marker"))
    # a marker's collective completed when a complete event has its key (seq known: pg, seq and op suffice)
    done_known = done.filter(pl.col("seq") >= 0).select("pid", "pg", "seq", "op").unique()
    left = markers.join(done.select(key).unique(), on=key, how="anti")
    left = pl.concat([left.filter(pl.col("seq") < 0),
                      left.filter(pl.col("seq") >= 0).join(done_known, on=["pid", "pg", "seq", "op"], how="anti")])
    # the issuing thread: a marker's own thread (completions may come on another); else itid where it is one
    tids = f.select(pl.col("pid").cast(pl.Int64), pl.col("tid").cast(pl.Int64)).unique()
    issuer = markers.select(*key, pl.col("tid").alias("__mt")).unique(key, keep="first")
    done = done.join(issuer, on=key, how="left").join(
        tids.with_columns(pl.col("tid").alias("__it")), left_on=["pid", "itid"], right_on=["pid", "tid"], how="left"
    ).with_columns(pl.coalesce("__mt", "__it", "tid").alias("tid")).drop("__mt", "__it")
    rows = pl.concat(
        [
            # a collective whose call raised (`state` "error") never completed
            done.with_columns(pl.when(pl.col("error")).then(None).otherwise(pl.col("end")).alias("done_us")),
            left.with_columns(pl.lit(None, dtype=pl.Int64).alias("done_us")),
        ],
        how="diagonal_relaxed",
    ).sort(["pid", "issue_us", "pg", "seq"])
    rows = rows.unique(["pid", "pg", "seq", "op", "issue_us"], keep="first", maintain_order=True)
    rows = _with_steps(rows, windows)
    rows = _with_gaps(rows, f)
    return rows.select([pl.col(k).cast(t) for k, t in _COMM_SCHEMA.items()])


def _with_steps(rows: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """epoch and step of the step window (any thread of the process) that each row's issue falls in."""
    n = rows.height
    ep = np.full(n, -1, dtype=np.int64)
    st = np.full(n, -1, dtype=np.int64)
    known = np.zeros(n, dtype=bool)
    w = windows.filter(pl.col("step").is_not_null() | pl.col("epoch").is_not_null()) if windows.height else windows
    if w.height and n:
        pid, ts = rows.get_column("pid").to_numpy(), rows.get_column("issue_us").to_numpy()
        for (p,), g in w.sort("ts").partition_by("pid", as_dict=True).items():
            a = g.get_column("ts").to_numpy()
            b = a + g.get_column("dur").fill_null(0).to_numpy()
            mine = np.flatnonzero(pid == p)
            k = np.searchsorted(a, ts[mine], side="right") - 1
            inside = (k >= 0) & (ts[mine] < b[np.maximum(k, 0)])
            at = mine[inside]
            ep[at] = g.get_column("epoch").fill_null(-1).to_numpy()[k[inside]]
            st[at] = g.get_column("step").fill_null(-1).to_numpy()[k[inside]]
            known[at] = True
            # after the last step ended: the step in progress when the trace ends (the next one)
            after = mine[ts[mine] >= b.max()]
            last = g.row(int(np.argmax(b)), named=True)
            if last["step"] is not None and len(after):
                ep[after] = -1 if last["epoch"] is None else last["epoch"]
                st[after] = last["step"] + 1
    return rows.with_columns(
        pl.Series("epoch", ep).replace(-1, None), pl.Series("step", st).replace(-1, None)
    )


def _layers(f: pl.DataFrame, pid: int, tid: int, comm: tuple[np.ndarray, np.ndarray]) -> list:
    """The gap painting's layers (DOING order but the last) of one thread."""
    t = f.filter((pl.col("pid") == pid) & (pl.col("tid") == tid) & pl.col("ts").is_not_null())
    cat, name = _s("cat"), _s("name")
    t = t.select(
        pl.col("ts").cast(pl.Int64), (pl.col("ts") + pl.col("dur").fill_null(0).clip(lower_bound=0)).alias("end"),
        cat.alias("cat"), name.alias("name"),
    )  # fmt: skip

    def of(expr: pl.Expr) -> tuple[np.ndarray, np.ndarray]:
        x = t.filter(expr.fill_null(False))
        return interval_union(x.get_column("ts").to_numpy(), x.get_column("end").to_numpy())

    gc = (pl.col("cat") == "gc") | pl.col("name").str.starts_with("gc.") | (pl.col("name") == "gc")
    return [
        of(pl.col("cat") == COMPILE_CAT),
        of(pl.col("cat").is_in([POSIX_CAT, TORCH_IO_CAT])),
        of(pl.col("cat") == DATA_CAT),
        of(gc),
        of(pl.col("cat") == GRAPH_CAT),
        comm,
        of(pl.col("cat") == AUTOGRAD_CAT),
        of(pl.col("cat") == OPTIMIZER_CAT),
    ]


def _with_gaps(rows: pl.DataFrame, f: pl.DataFrame) -> pl.DataFrame:
    """gap_<what>_us: what each row's issuing thread did since the process's previous collective's issue
    (the process's first event for its first collective), and the compile ids begun in that time."""
    n = rows.height
    gaps = np.zeros((n, len(DOING)), dtype=np.int64)
    ids: list[str | None] = [None] * n
    pid = rows.get_column("pid").to_numpy()
    tid = rows.get_column("tid").fill_null(-1).to_numpy()
    issue = rows.get_column("issue_us").to_numpy()
    done = rows.get_column("done_us")
    end = done.fill_null(0).to_numpy()
    complete = done.is_not_null().to_numpy()
    first = dict(
        f.group_by(pl.col("pid").cast(pl.Int64)).agg(pl.col("ts").cast(pl.Int64).min()).drop_nulls().iter_rows()
    )
    compiles = f.filter((_s("cat") == COMPILE_CAT).fill_null(False) & pl.col("compile_id").is_not_null()).select(
        pl.col("pid").cast(pl.Int64), pl.col("ts").cast(pl.Int64), _s("compile_id").alias("cid")
    ).group_by("pid", "cid").agg(pl.col("ts").min())  # fmt: skip
    for p in np.unique(pid).tolist():
        mine = np.flatnonzero(pid == p)  # rows are sorted by issue within a process
        starts = np.concatenate([[min(first.get(p, issue[mine[0]]), issue[mine[0]])], issue[mine[:-1]]])
        c = complete[mine]
        comm = interval_union(issue[mine][c], end[mine][c])
        ctab = compiles.filter(pl.col("pid") == p)
        for t in np.unique(tid[mine]).tolist():
            sel = mine[tid[mine] == t]
            a, b = starts[np.isin(mine, sel)], issue[sel]
            gaps[sel] = paint(_layers(f, p, t, comm), a, b)
            if ctab.height:
                cts, cid = ctab.get_column("ts").to_numpy(), ctab.get_column("cid").to_list()
                for i, (lo, hi) in zip(sel.tolist(), zip(a.tolist(), b.tolist(), strict=True), strict=True):
                    began = sorted({cid[j] for j in np.flatnonzero((cts >= lo) & (cts < hi)).tolist()})
                    ids[i] = ",".join(began) or None
    return rows.with_columns(
        *(pl.Series(c, gaps[:, i]) for i, c in enumerate(GAP_COLUMNS)),
        pl.Series("gap_compile_ids", ids, dtype=pl.String),
    )


def _processes(f: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Per process of the file: how its file ended and what it did last."""
    out = []
    cat, name = _s("cat"), _s("name")
    for (p,), g in f.filter(pl.col("pid").is_not_null()).partition_by("pid", as_dict=True).items():
        marks = g.filter((cat == "dftracer").fill_null(False))
        mnames = marks.get_column("name").cast(pl.String).to_list()
        cut = marks.filter(name == "cut")
        cut_row = cut.row(0, named=True) if cut.height else {}
        ranks = g.select(_rank(g)).to_series().drop_nulls()
        worlds = g.select(_col(g, "world_size", pl.Int64)).to_series().drop_nulls()
        hosts = g.select(_col(g, "host", pl.String)).to_series().drop_nulls()
        ev = g.filter(~cat.is_in(["dftracer", "dynascope", COMM_CAT]).fill_null(True) & pl.col("ts").is_not_null())
        ev = ev.with_columns((pl.col("ts") + pl.col("dur").fill_null(0)).alias("__end"))
        last_us = ev.get_column("__end").max() if ev.height else None
        w = windows.filter((pl.col("pid") == p) & pl.col("step").is_not_null()) if windows.height else windows
        last = dict(w.sort("ts").tail(1).row(0, named=True)) if w.height else {}
        stop = g.select((pl.col("ts") + pl.col("dur").fill_null(0)).max()).item()  # the cut or end record too
        if last and stop is not None and stop > last["ts"] + (last["dur"] or 0):
            last["step"] += 1  # it stopped in the step after the last one that ended
        out.append({
            "trace_file": str(g.get_column("trace_file").cast(pl.String)[0]),
            "pid": int(p),
            "rank": ranks.min() if ranks.len() else None,
            "host": str(hosts[0]) if hosts.len() else None,
            "world_size": worlds.max() if worlds.len() else None,
            "ended": int("end" in mnames),
            "cut": (str(cut_row.get("signal") or "a signal")) if cut.height else None,
            "open": _text(cut_row.get("open")),
            "pending": _text(cut_row.get("pending")),
            "last_us": last_us,
            "last_events": _last_events(ev),
            "last_epoch": last.get("epoch"),
            "last_step": last.get("step"),
            "events": g.height,
        })  # fmt: skip
    return pl.DataFrame(out, schema=_PROC_SCHEMA) if out else _empty("comm_proc")


def _text(value) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _last_events(ev: pl.DataFrame, n: int = 3) -> str | None:
    """The names of the last events to end (the last first), distinct."""
    if ev.height == 0:
        return None
    names = ev.sort("__end", descending=True).get_column("name").cast(pl.String).head(50).to_list()
    return ", ".join(list(dict.fromkeys(x for x in names if x))[:n]) or None


# ----------------------------------------------------------------------------------------------
# functional collectives (op events of compiled graphs)


def functional_collectives(ops: pl.DataFrame) -> pl.DataFrame:
    """Collectives from op events with `comm_op` / `comm_key` attribution (one file's op rows: pid, tid,
    ts, dur, name, comm_op, comm_pg, comm_bytes, comm_key, and the graph call's `p_idx` where known):
    each collective op paired with the wait of the same comm_key that follows it on its thread; seq = its
    place in its (process, group)'s issue order. Rows as the `comm` events' (name = the operation, pg =
    group + "/functional", ts = the op's start, dur = to the wait's end, source "functional")."""
    need = {"comm_op", "comm_key", "ts", "pid", "tid", "name"}
    if not need <= set(ops.columns):
        return pl.DataFrame()
    x = ops.filter(pl.col("comm_key").is_not_null()).select(
        pl.col("pid").cast(pl.Int64), pl.col("tid").cast(pl.Int64), pl.col("ts").cast(pl.Int64),
        (pl.col("ts") + pl.col("dur").fill_null(0)).cast(pl.Int64).alias("end"), _s("name").alias("name"),
        _s("comm_op").alias("comm_op"), _col(ops, "comm_pg", pl.String).fill_null("?").alias("pg"),
        _col(ops, "comm_bytes", pl.Int64).alias("bytes"), _s("comm_key").alias("key"),
        _col(ops, "rank", pl.Int64).alias("rank"),
    ).sort("pid", "tid", "ts")  # fmt: skip
    if x.height == 0:
        return pl.DataFrame()
    is_wait = pl.col("name").str.contains("wait") | pl.col("comm_op").str.contains("wait")
    nth = pl.int_range(pl.len()).over(["pid", "tid", "key"]).alias("__n")
    starts = x.filter(~is_wait).sort("ts").with_columns(nth)
    waits = x.filter(is_wait).sort("ts").with_columns(nth)
    waits = waits.select("pid", "tid", "key", "__n", pl.col("end").alias("wend"))
    # the n-th collective of a key (a node of the graph) with the n-th wait of that key on the thread
    paired = starts.join(waits, on=["pid", "tid", "key", "__n"], how="left").sort("ts")
    paired = paired.with_columns(
        (pl.col("pg") + "/functional").alias("pg"),
        pl.int_range(pl.len()).over(["pid", "pg"]).cast(pl.Int64).alias("seq"),
        pl.coalesce("wend", "end").alias("done"),
    )
    return paired.select(
        pl.col("comm_op").alias("name"), pl.lit(COMM_CAT).alias("cat"), "pid", "tid", "ts",
        (pl.col("done") - pl.col("ts")).alias("dur"), "pg", "seq", "bytes", "rank",
        pl.lit("functional").alias("source"), pl.lit("done").alias("state"),
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------
# job-wide


def finish_tables(comm: pl.DataFrame, procs: pl.DataFrame, t0: int | None) -> dict[str, pl.DataFrame]:
    """clocks, collectives, stragglers and hangs from the merged partial tables; times are µs from `t0`
    (the job's first event) on aligned clocks."""
    clocks = clock_offsets(comm, procs)
    offset = dict(clocks.select("rank", "offset_us").iter_rows()) if clocks.height else {}
    base = int(t0 or 0)
    c = comm
    if c.height:
        off = pl.col("rank").replace_strict(offset, default=0, return_dtype=pl.Int64) if offset else pl.lit(0)
        c = c.with_columns(
            (pl.col("issue_us") - off - base).alias("issue_us"), (pl.col("done_us") - off - base).alias("done_us")
        )
    joined = collectives(c)
    return {
        "clocks": clocks,
        "collectives": joined,
        "stragglers": stragglers(c, joined),
        "hangs": hangs(c, procs, base, offset),
    }


_CLOCK_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "rank": pl.Int64, "host": pl.String, "offset_us": pl.Int64, "residual_us": pl.Int64, "collectives": pl.Int64,
    "how": pl.String,
}  # fmt: skip


def clock_offsets(comm: pl.DataFrame, procs: pl.DataFrame) -> pl.DataFrame:
    """Per rank: its clock's offset against the reference host (rank 0's, or the lowest rank's), estimated
    per host from the completions of the collectives both hosts completed (module docstring)."""
    hosts = _rank_hosts(comm, procs)
    if not hosts:
        return pl.DataFrame(schema=_CLOCK_SCHEMA)
    ref_rank = min(hosts)
    ref_host = hosts[ref_rank]
    done = comm.filter(
        pl.col("done_us").is_not_null() & pl.col("rank").is_not_null() & (pl.col("seq") >= 0)
        & pl.col("op").str.contains("|".join(SYMMETRIC))
    ).with_columns(
        pl.col("rank").replace_strict(hosts, default=None, return_dtype=pl.String).alias("__host")
    )
    per_host = done.group_by("__host", "pg", "seq").agg(pl.col("done_us").median().alias("t"))
    ref = per_host.filter(pl.col("__host") == ref_host).select("pg", "seq", pl.col("t").alias("t0"))
    found: dict[str, tuple[int, int, int]] = {}
    for h in sorted(set(hosts.values()) - {ref_host}):
        d = per_host.filter(pl.col("__host") == h).join(ref, on=["pg", "seq"]).select(pl.col("t") - pl.col("t0"))
        diffs = d.to_series().to_numpy()
        if len(diffs):
            med = float(np.median(diffs))
            found[h] = (round(med), round(float(np.median(np.abs(diffs - med)))), len(diffs))
    rows: list[tuple] = []
    for rank, host in sorted(hosts.items()):
        if host == ref_host:
            how = "reference clock" if rank == ref_rank else f"same host as rank {ref_rank}: one clock"
            rows.append((rank, host, 0, 0, 0, how))
        elif host in found:
            off, res, n = found[host]
            rows.append((rank, host, off, res, n, f"aligned by {n} collective completions"))
        else:
            rows.append((rank, host, 0, None, 0, "no collective completed on both hosts: not aligned"))
    return pl.DataFrame(rows, schema=_CLOCK_SCHEMA, orient="row")


def _rank_hosts(comm: pl.DataFrame, procs: pl.DataFrame) -> dict[int, str]:
    out: dict[int, str] = {}
    for frame in (procs, comm):
        if frame.height and {"rank", "host"} <= set(frame.columns):
            for r, h in frame.select("rank", "host").drop_nulls("rank").unique().iter_rows():
                out.setdefault(int(r), str(h or ""))
    return out


_COLL_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "pg": pl.String, "seq": pl.Int64, "op": pl.String, "source": pl.String, "bytes": pl.Int64,
    "group_size": pl.Int64, "ranks": pl.Int64, "completed": pl.Int64, "all_completed": pl.Boolean,
    "first_issue_us": pl.Int64, "last_issue_us": pl.Int64, "last_rank": pl.Int64, "late_us": pl.Int64,
    "last_done_us": pl.Int64, "epoch": pl.Int64, "step": pl.Int64, "rank_list": pl.List(pl.Int64),
    "issue_list": pl.List(pl.Int64), "done_list": pl.List(pl.Int64),
}  # fmt: skip


def collectives(c: pl.DataFrame) -> pl.DataFrame:
    """One row per (pg, seq) (sequence numbers known): module docstring. Sorted by pg, seq."""
    k = c.filter((pl.col("seq") >= 0) & pl.col("rank").is_not_null()) if c.height else c
    if k.height == 0:
        return pl.DataFrame(schema=_COLL_SCHEMA)
    k = k.sort("rank", "issue_us").unique(["pg", "seq", "rank"], keep="first")
    g = k.sort("rank").group_by("pg", "seq").agg(
        pl.col("op").mode().sort().first(),
        pl.col("source").drop_nulls().mode().sort().first(),
        pl.col("bytes").max(),
        pl.col("group_size").max(),
        pl.len().cast(pl.Int64).alias("ranks"),
        pl.col("done_us").is_not_null().sum().cast(pl.Int64).alias("completed"),
        pl.col("issue_us").min().alias("first_issue_us"),
        pl.col("issue_us").max().alias("last_issue_us"),
        pl.col("rank").sort_by("issue_us", "rank").last().alias("last_rank"),
        pl.col("done_us").max().alias("last_done_us"),
        pl.col("epoch").sort_by("issue_us", "rank").last().alias("epoch"),
        pl.col("step").sort_by("issue_us", "rank").last().alias("step"),
        pl.col("rank").alias("rank_list"),
        pl.col("issue_us").alias("issue_list"),
        pl.col("done_us").alias("done_list"),
    )
    expected = pl.coalesce("group_size", "ranks")
    g = g.with_columns(
        (pl.col("last_issue_us") - pl.col("first_issue_us")).alias("late_us"),
        ((pl.col("completed") >= expected) & (pl.col("ranks") >= expected)).alias("all_completed"),
    )
    return g.select([pl.col(n).cast(t) for n, t in _COLL_SCHEMA.items()]).sort(
        pl.col("pg").str.len_chars(), "pg", "seq"
    )


_STRAG_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "rank": pl.Int64, "epoch": pl.Int64, "step": pl.Int64, "op": pl.String, "pg": pl.String, "seq": pl.Int64,
    "late_us": pl.Int64, "collectives": pl.Int64, "doing": pl.String, "doing_us": pl.Int64,
}  # fmt: skip
STRAGGLER_ROWS = 50
MIN_LATE_US = 100  # a rank less late than this is on time


def stragglers(c: pl.DataFrame, joined: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, step) where that rank issued collectives last (per collective where there are no steps):
    the most it was late (op, pg, seq of that collective), how many collectives it was last in, and what it
    did instead (module docstring). Most late first, at most STRAGGLER_ROWS rows."""
    if joined.height == 0 or c.height == 0:
        return pl.DataFrame(schema=_STRAG_SCHEMA)
    late = joined.filter((pl.col("ranks") >= 2) & (pl.col("late_us") >= MIN_LATE_US)).select(
        "pg", "seq", "op", "last_rank", "late_us"
    )
    if late.height == 0:
        return pl.DataFrame(schema=_STRAG_SCHEMA)
    rows = c.filter(pl.col("seq") >= 0).join(late.select("pg", "seq"), on=["pg", "seq"])
    # the others' median gap parts before the same collective
    others = rows.join(late.select("pg", "seq", pl.col("last_rank").alias("rank")), on=["pg", "seq", "rank"],
                       how="anti").group_by("pg", "seq").agg(pl.col(c).median() for c in GAP_COLUMNS)  # fmt: skip
    mine = rows.join(late.select("pg", "seq", pl.col("last_rank").alias("rank"), "late_us"), on=["pg", "seq", "rank"])
    mine = mine.join(others, on=["pg", "seq"], how="left", suffix="_med")
    excess = [(pl.col(g) - pl.col(f"{g}_med").fill_null(0)).clip(lower_bound=0).alias(f"x_{d}")
              for g, d in zip(GAP_COLUMNS, DOING, strict=True)]  # fmt: skip
    mine = mine.with_columns(excess)
    # one row per (rank, step); per collective where the rank has no steps
    group = pl.when(pl.col("step").is_null() & pl.col("epoch").is_null()).then(pl.col("seq")).otherwise(None)
    per = (
        mine.with_columns(group.alias("__one"))
        .sort(["late_us", "seq"], descending=[True, False], maintain_order=True)
        # one row a rank and step over every group (a step's functional collectives, group "<pg>/functional",
        # made a second row that printed like the first): the most late collective names it
        .group_by("rank", "epoch", "step", "__one", maintain_order=True)
        .agg(
            pl.col("pg").first(), pl.col("op").first(), pl.col("seq").first(), pl.col("late_us").first(),
            pl.len().alias("collectives"),
            *(pl.col(f"x_{d}").sum() for d in DOING), pl.col("gap_compile_ids").drop_nulls().first().alias("ids"),
        )
    )
    out = []
    for r in per.iter_rows(named=True):
        what = max(DOING, key=lambda d: r[f"x_{d}"])
        label = DOING_LABELS[what]
        if what == "compile" and r["ids"]:
            again = any(_attempt(i) > 0 for i in str(r["ids"]).split(","))
            label = f"{'recompile' if again else 'compile'} {r['ids']}"
        out.append({
            "rank": r["rank"], "epoch": r["epoch"], "step": r["step"], "op": r["op"], "pg": r["pg"], "seq": r["seq"],
            "late_us": r["late_us"], "collectives": r["collectives"],
            "doing": label if r[f"x_{what}"] > 0 else "nothing stands out",
            "doing_us": min(int(r[f"x_{what}"]), int(r["late_us"])),
        })  # fmt: skip
    frame = pl.DataFrame(out, schema=_STRAG_SCHEMA)
    return frame.sort(["late_us", "rank", "epoch", "step"], descending=[True, False, False, False],
                      nulls_last=True).head(STRAGGLER_ROWS)  # fmt: skip


def _attempt(compile_id: str) -> int:
    tail = compile_id.rsplit("/", 1)[-1] if "/" in compile_id else "0"
    digits = "".join(ch for ch in tail if ch.isdigit())
    return int(digits) if digits else 0


_HANG_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "rank": pl.Int64, "state": pl.String, "op": pl.String, "pg": pl.String, "seq": pl.Int64,
    "since_us": pl.Int64, "epoch": pl.Int64, "step": pl.Int64, "waits_for": pl.String, "where": pl.String,
    "file_end": pl.String,
}  # fmt: skip


def hangs(c: pl.DataFrame, procs: pl.DataFrame, base: int = 0, offset: dict | None = None) -> pl.DataFrame:
    """Collectives a rank waited in that were never completed where its file was cut short, or that some
    rank of the group never issued (a job stopped while one rank waited for another: the waiting rank's
    collective may still end as completed when the stop aborts it). Per waiting rank ("waiting") its first
    such collective; per rank of that collective's group that never issued it ("never issued") where it was
    instead. Empty when every rank issued every collective and no cut file holds one pending."""
    if procs.height == 0 or c.height == 0:
        return pl.DataFrame(schema=_HANG_SCHEMA)
    # a rank's main process: the one with the most events (its DataLoader workers carry its rank too)
    ranked = procs.filter(pl.col("rank").is_not_null()).sort(["events", "pid"], descending=[True, False])
    ranked = ranked.unique("rank", keep="first", maintain_order=True).sort("rank")
    end_of = {r["rank"]: _file_end(r) for r in ranked.iter_rows(named=True)}
    proc_of = {r["rank"]: r for r in ranked.iter_rows(named=True)}
    short = [r for r, how in end_of.items() if how != "complete"]
    members: dict[str, set[int]] = {}
    for pg, rank in c.select("pg", "rank").drop_nulls().unique().iter_rows():
        members.setdefault(pg, set()).add(int(rank))
    everyone = set(proc_of)
    known = c.filter((pl.col("seq") >= 0) & pl.col("rank").is_not_null())
    expected = {pg: len(m) for pg, m in members.items()}
    seen = known.group_by("pg", "seq").agg(pl.col("rank").n_unique().alias("__n"), pl.col("group_size").max())
    seen = seen.with_columns(pl.max_horizontal(
        pl.col("pg").replace_strict(expected, default=0, return_dtype=pl.Int64),
        pl.when(pl.col("group_size") <= len(everyone)).then(pl.col("group_size")).otherwise(0),
    ).alias("__want"))  # fmt: skip
    partial = seen.filter(pl.col("__n") < pl.col("__want")).select("pg", "seq", "__want")
    if partial.height:  # a rank missing from a collective stopped before it (not a trace that began late)
        last = {(pg, r): s for pg, r, s in known.group_by("pg", "rank").agg(pl.col("seq").max()).iter_rows()}
        present = known.group_by("pg", "seq").agg(pl.col("rank").unique())
        stopped: list[tuple[str, int]] = []
        for pg, seq, want, ranks_in in partial.join(present, on=["pg", "seq"]).iter_rows():
            group = members.get(pg, set()) | (everyone if want >= len(everyone) else set())
            absent = group - set(ranks_in)
            if absent and all(last.get((pg, r), -1) < seq for r in absent):
                stopped.append((pg, seq))
        partial = pl.DataFrame({"pg": [p for p, _ in stopped], "seq": [s for _, s in stopped]},
                               schema={"pg": pl.String, "seq": pl.Int64})  # fmt: skip
    partial = partial.select("pg", "seq")
    pend = pl.concat([
        c.filter(pl.col("done_us").is_null() & pl.col("rank").is_in(short)),
        known.join(partial, on=["pg", "seq"]),
    ], how="vertical_relaxed")  # fmt: skip
    if pend.height == 0:
        return pl.DataFrame(schema=_HANG_SCHEMA)
    first = pend.sort("issue_us", "pg", "seq").unique("rank", keep="first", maintain_order=True).sort("rank")
    issued = c.select("rank", "pg", "seq").unique()
    rows = []
    named: set[tuple] = set()
    for w in first.iter_rows(named=True):
        rows.append({
            "rank": w["rank"], "state": "waiting", "op": w["op"], "pg": w["pg"], "seq": w["seq"],
            "since_us": w["issue_us"], "epoch": w["epoch"], "step": w["step"], "waits_for": None,
            "where": f"in {w['op']} (pg {w['pg']}, seq {w['seq']})", "file_end": end_of.get(w["rank"]),
        })  # fmt: skip
        size = w["group_size"]
        group = members.get(w["pg"], set()) | (everyone if size and size >= len(everyone) else set())
        have = set(issued.filter((pl.col("pg") == w["pg"]) & (pl.col("seq") == w["seq"])).get_column("rank").to_list())
        for r in sorted(group - have):
            if (r, w["pg"], w["seq"]) in named:
                continue
            named.add((r, w["pg"], w["seq"]))
            own = first.filter(pl.col("rank") == r)
            rows.append({
                "rank": r, "state": "never issued", "op": w["op"], "pg": w["pg"], "seq": w["seq"],
                "since_us": None, "epoch": None, "step": None, "waits_for": None,
                "where": _where_instead(proc_of.get(r), own.row(0, named=True) if own.height else None),
                "file_end": end_of.get(r, "no trace file"),
            })  # fmt: skip
    out = pl.DataFrame(rows, schema=_HANG_SCHEMA)
    # who the waiting ranks wait for: the ranks that never issued their collective
    never = out.filter(pl.col("state") == "never issued").group_by("pg", "seq").agg(
        pl.col("rank").sort().cast(pl.String).str.join(", ").alias("__w")
    )
    out = out.join(never, on=["pg", "seq"], how="left").with_columns(
        pl.when(pl.col("state") == "waiting").then(pl.col("__w")).otherwise(None).alias("waits_for")
    ).drop("__w")
    return out.select(list(_HANG_SCHEMA)).sort(["state", "rank"], descending=[True, False])


def _file_end(proc: dict) -> str:
    if proc.get("cut"):
        return f"cut by {proc['cut']}"
    return "complete" if proc.get("ended") else "no end record (killed or crashed)"


def _where_instead(proc: dict | None, own: dict | None) -> str:
    """Where a rank that never issued a collective was: its own pending collective, the regions open at
    the cut, else its last events."""
    if proc is None:
        return "no trace file for this rank"
    parts = []
    if own is not None:
        parts.append(f"waiting in {own['op']} (pg {own['pg']}, seq {own['seq']})")
    regions = _open_regions(proc.get("open"))
    if regions:
        parts.append(f"in {regions}")
    if not parts and proc.get("last_events"):
        parts.append(f"past its last events ({proc['last_events']})")
    text = ", ".join(parts) if parts else "nowhere the trace recorded"
    if proc.get("last_step") is not None:
        text += f" in step {proc['last_step']}"
    return text


def _open_regions(text: str | None) -> str | None:
    """The innermost region open at the cut on each thread that had one (the `cut` record's `open`)."""
    if not text:
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return text
    found: list[str] = []

    def walk(v) -> None:
        if isinstance(v, str):
            found.append(v)
        elif isinstance(v, list):
            if v and all(isinstance(x, str) for x in v):
                found.append(" > ".join(v))
            else:
                for x in v:
                    walk(x)
        elif isinstance(v, dict):
            for key in ("regions", "open", "names", "stack"):
                if key in v:
                    walk(v[key])
                    return
            for x in v.values():
                if isinstance(x, (list, str)):
                    walk(x)

    walk(value)
    return "; ".join(dict.fromkeys(x for x in found if x)) or None


def hang_lines(h: pl.DataFrame) -> list[str]:
    """One sentence per waiting collective: "rank 0 waits in all_reduce (pg 0, seq 41) since step 2; rank 1
    never issued it: it was in dataloader.next"."""
    if h.height == 0:
        return []
    lines = []
    waiting = h.filter(pl.col("state") == "waiting")
    for (pg, seq), g in waiting.group_by("pg", "seq", maintain_order=True):
        ranks = g.get_column("rank").to_list()
        w = g.row(0, named=True)
        since = f" since step {w['step']}" if w["step"] is not None else (
            f" since {w['since_us'] / 1e6:.3g} s" if w["since_us"] is not None else "")
        who = _ranks(ranks)
        text = f"{who} {'waits' if len(ranks) == 1 else 'wait'} in {w['op']} (pg {pg}, seq {seq}){since}"
        never = h.filter((pl.col("state") == "never issued") & (pl.col("pg") == pg) & (pl.col("seq") == seq))
        for r in never.iter_rows(named=True):
            text += f"; rank {r['rank']} never issued it: it was {r['where']}"
        if never.height == 0:
            text += "; every rank of its group issued it (stopped before it completed)"
        lines.append(text)
    return lines


def _ranks(ranks: Iterable[int]) -> str:
    rs = sorted(ranks)
    return f"rank {rs[0]}" if len(rs) == 1 else "ranks " + ", ".join(str(r) for r in rs)
