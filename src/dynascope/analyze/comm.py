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

Job-wide (analyze/comm_job.py: `finish_tables`, after merging):

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

__all__ = ["COMM_COLUMNS", "COMM_INT_COLUMNS", "DOING", "KEYS", "SCHEMAS", "frame_tables", "functional_collectives"]

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

