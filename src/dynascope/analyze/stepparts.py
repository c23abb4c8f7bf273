"""The steps of each thread, and the parts of each step (docs/trace-format.md, "Steps").

Steps, per thread (pid, tid of one file):

1. its user regions with an `epoch` or `step` arg (`steps.regions`), when it has any;
2. else, when it has `optimizer.step` events, automatic steps: the pacing optimizer is the `opt` with the
   most step events (ties: the one whose first step comes last). Step k ends where the k-th pacing step
   event ends; step 0 starts at the thread's earliest dataloader / autograd / optimizer / graph-call /
   compile event that starts before that end, step k > 0 where step k - 1 ended. Time after the last
   pacing step is in no step. Automatic steps have epoch null and step k = 0, 1, ...

Parts: each instant of a step's window [ts, ts + dur) is painted by the first of these that covers it
(events of the window's own thread): compile (cat dynamo.compile) > io (POSIX, torch.io: file reads and
writes, torch.save / torch.load) > data (dataloader) > comm (exposed communication, below) > backward
(autograd, and backward graph calls) > optimizer (optimizer) > forward > eval > other.

comm: a collective of this process (a `comm` event, docs/trace-format.md: from its issue to its completion,
on any thread) is in flight and the window's thread runs no graph call and no op: DDP's reducer waiting for
its last buckets at the end of backward, a blocking all_reduce. It is time the step would have painted
backward, optimizer, forward or other. Per window also, where the process has collectives (else 0):
compute_us (the union of the thread's graph calls and ops), comm_total_us (the union of the process's
collectives in flight), comm_hidden_us (in flight while the thread computes); comm_us (the part) is in flight
while it does not, and not painted compile, io or data. I/O is I/O wherever it happens in a step (a checkpoint
saved between two forward passes is not forward time); only while compiling is it compile's (the compile
total counts it). Eval is the graph calls run with grad disabled (torch.no_grad, inference_mode: the
graph's `grad_enabled` is 0) on a thread that trains (has backward or optimizer events); on a thread that
never trains (an inference loop) they are its forward. Forward (eval) is each run of forward (eval) graph
calls that no data, backward, optimizer, I/O or eval (forward) event interrupts, from its first call's
start to its last call's end (the eager code between the graphs of one forward is forward time). So the
parts of a window add up to its duration exactly.

Also per window: the compile ids whose first compile event starts in it (a recompile shows there), and
the files `torch.save`d or written through Python file objects in it (a checkpoint).

Only threads with steps are painted, and only events of the cats above are looked at: a trace without
regions or optimizer steps costs nothing here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import numpy as np
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
from dynascope.analyze.steps import regions
from dynascope.trace.format import COMM_CAT

__all__ = [
    "COMM_NUMBER_COLUMNS",
    "LIST_COLUMNS",
    "PARTS",
    "PART_COLUMNS",
    "STEP_EXTRA_COLUMNS",
    "STEP_NUMBER_COLUMNS",
    "covered_in",
    "interval_union",
    "intervals_and",
    "intervals_minus",
    "op_windows",
    "paint",
    "step_parts",
    "step_sources",
    "step_windows",
]

# the parts, in the order of the by_step columns (`<part>_us`)
PARTS = ("data", "forward", "eval", "backward", "optimizer", "io", "compile", "comm", "other")
PART_COLUMNS = tuple(f"{p}_us" for p in PARTS)
# what else a window gets: compile ids begun in it (count and ids), files saved or written in it
LIST_COLUMNS = ("compile_ids", "saved")
# per window, where its process has collectives: compute, collectives in flight, and in flight under compute
COMM_NUMBER_COLUMNS = ("compute_us", "comm_total_us", "comm_hidden_us")
# the number columns of a window, summed per step
STEP_NUMBER_COLUMNS = (*PART_COLUMNS, "compiles", *COMM_NUMBER_COLUMNS)
STEP_EXTRA_COLUMNS = (*PART_COLUMNS, "compiles", *LIST_COLUMNS)

# painting order: the first that covers an instant owns it; "other" is the rest
_PRIORITY = ("compile", "io", "data", "comm", "backward", "optimizer", "forward", "eval")
_COLUMN_OF = [PARTS.index(p) for p in _PRIORITY]
_OTHER = PARTS.index("other")

OPTIMIZER_STEP = "optimizer.step"
_PAINT_CATS = [COMPILE_CAT, DATA_CAT, AUTOGRAD_CAT, OPTIMIZER_CAT, GRAPH_CAT, POSIX_CAT, TORCH_IO_CAT, COMM_CAT]
_FIRST_CATS = [DATA_CAT, AUTOGRAD_CAT, OPTIMIZER_CAT, GRAPH_CAT, COMPILE_CAT]  # what starts step 0
_FORWARD_PHASES = ["forward", "inference"]
_WINDOW_COLUMNS = {"pid": pl.Int64, "tid": pl.Int64, "ts": pl.Int64, "dur": pl.Int64, "epoch": pl.Int64,
                   "step": pl.Int64, "auto": pl.Boolean}  # fmt: skip


def _cat() -> pl.Expr:
    return pl.col("cat").cast(pl.String)


def _name() -> pl.Expr:
    return pl.col("name").cast(pl.String)


def _optimizer_steps(f: pl.DataFrame) -> pl.DataFrame:
    if not (f.get_column("cat") == OPTIMIZER_CAT).any():  # one comparison: most traces have none
        return f.clear()
    return f.filter(
        (_cat() == OPTIMIZER_CAT) & (_name() == OPTIMIZER_STEP) & pl.col("ts").is_not_null()
        & pl.col("pid").is_not_null() & pl.col("tid").is_not_null()
    )  # fmt: skip


def step_sources(f: pl.DataFrame) -> pl.DataFrame:
    """The rows of `f` that make steps: user regions with an epoch or a step, and optimizer steps."""
    return pl.concat([regions(f), _optimizer_steps(f)], how="vertical_relaxed")


def step_windows(f: pl.DataFrame) -> pl.DataFrame:
    """One row per step window of one file's rows `f` (ops left out): pid, tid, ts, dur, epoch, step, auto
    (true for an automatic step). User regions first, in their order in `f`; then each thread's automatic
    steps in time order."""
    user = regions(f).select(
        [pl.col(c).cast(t, strict=False) for c, t in _WINDOW_COLUMNS.items() if c != "auto"]
        + [pl.lit(False).alias("auto")]
    )
    paced = _optimizer_steps(f)
    if paced.height == 0:
        return user
    if user.height:
        paced = paced.join(user.select("pid", "tid").unique(), on=["pid", "tid"], how="anti")
    autos = [_auto_windows(thread, steps, f) for thread, steps in _by_thread(paced)]
    return pl.concat([user, *autos], how="vertical_relaxed")


def _by_thread(f: pl.DataFrame) -> Iterator[tuple[tuple, pl.DataFrame]]:
    if f.height:
        yield from f.partition_by(["pid", "tid"], as_dict=True).items()


def _auto_windows(thread: tuple, steps: pl.DataFrame, f: pl.DataFrame) -> pl.DataFrame:
    pid, tid = thread
    s = steps.select(
        pl.col("opt").cast(pl.Int64, strict=False).fill_null(-1).alias("opt"),
        pl.col("ts").cast(pl.Int64),
        (pl.col("ts") + pl.col("dur").fill_null(0).clip(lower_bound=0)).cast(pl.Int64).alias("end"),
    )
    per_opt = s.group_by("opt").agg(pl.len().alias("n"), pl.col("ts").min().alias("first"))
    pacing = per_opt.sort(["n", "first", "opt"], descending=[True, True, False]).get_column("opt")[0]
    ends = np.sort(s.filter(pl.col("opt") == pacing).get_column("end").to_numpy())
    # ts is an Int64 column: its min is an int (polars types scalars as any Python literal)
    first = cast("int | None", f.filter(
        (pl.col("pid") == pid) & (pl.col("tid") == tid) & _cat().is_in(_FIRST_CATS) & (pl.col("ts") < int(ends[0]))
    ).get_column("ts").min())  # fmt: skip
    start0 = int(ends[0]) if first is None else first
    starts = np.concatenate([[start0], ends[:-1]])
    n = len(ends)
    return pl.DataFrame(
        {
            "pid": np.full(n, pid, dtype=np.int64),
            "tid": np.full(n, tid, dtype=np.int64),
            "ts": starts,
            "dur": ends - starts,
            "epoch": pl.Series([None] * n, dtype=pl.Int64),
            "step": np.arange(n, dtype=np.int64),
            "auto": np.ones(n, dtype=bool),
        },
        schema=_WINDOW_COLUMNS,
    )


def op_windows(windows: pl.DataFrame) -> pl.DataFrame:
    """The windows as `steps.ops_per_region` counts ops in them: a region covers [ts, ts + dur] (as
    always), an automatic step [ts, ts + dur) (an op that starts where one step ends is in the next)."""
    if not windows.get_column("auto").any():
        return windows
    shorter = pl.when(pl.col("auto") & (pl.col("dur") > 0)).then(pl.col("dur") - 1).otherwise(pl.col("dur"))
    return windows.with_columns(shorter.alias("dur"))


# ----------------------------------------------------------------------------------------------
# painting


def step_parts(
    f: pl.DataFrame, windows: pl.DataFrame, ops: pl.DataFrame | None = None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per window (same order): the part columns (µs), `compiles` (how many compile ids have their first
    compile event in the window) and COMM_NUMBER_COLUMNS; and, as (window row, column, name) rows, the
    names that go in the list columns: `compile_ids` (those compile ids), `saved` (files torch.save'd or
    written in the window). `ops`: the file's op times (pid, tid, ts, dur), compute besides graph calls."""
    n = windows.height
    parts = np.zeros((n, len(PARTS)), dtype=np.int64)
    extra = np.zeros((n, len(COMM_NUMBER_COLUMNS)), dtype=np.int64)
    compiles = np.zeros(n, dtype=np.int64)
    names: list[tuple[int, str, str]] = []
    ev = _PaintEvents(f)
    w = windows.select(
        pl.col("pid").fill_null(-1), pl.col("tid").fill_null(-1), pl.col("ts").fill_null(0),
        pl.col("dur").fill_null(0).clip(lower_bound=0),
    )  # fmt: skip
    w_pid, w_tid, w_ts, w_dur = (w.get_column(c).to_numpy() for c in w.columns)
    for pid, tid in _pairs(w_pid, w_tid):
        rows = np.flatnonzero((w_pid == pid) & (w_tid == tid)) if n > 1 else np.zeros(1, dtype=np.int64)
        a = w_ts[rows]
        b = a + w_dur[rows]
        e = ev.thread(pid, tid)
        comm = ev.comm(pid)
        if e is None and comm is None:
            parts[rows, _OTHER] = b - a
            continue
        if e is None:
            e = np.zeros(0, dtype=np.int64)
        exposed = None
        if comm is not None:
            compute = _compute(ev, e, ops, pid, tid)
            exposed = intervals_minus(*comm, *compute)
            extra[rows, 0] = covered_in(*compute, a, b)
            extra[rows, 1] = covered_in(*comm, a, b)
            extra[rows, 2] = covered_in(*intervals_and(*comm, *compute), a, b)
        parts[rows] = _paint_thread(ev, e, a, b, exposed)
        _compiles_in(ev, e, a, b, rows, compiles, names)
        _saved_in(ev, e, a, b, rows, names)
    numbers = pl.DataFrame(
        [
            *(pl.Series(c, parts[:, i]) for i, c in enumerate(PART_COLUMNS)),
            pl.Series("compiles", compiles),
            *(pl.Series(c, extra[:, i]) for i, c in enumerate(COMM_NUMBER_COLUMNS)),
        ]
    )
    listed = pl.DataFrame(names, schema={"row": pl.Int64, "column": pl.String, "item": pl.String}, orient="row")
    return numbers, listed


def _compute(
    ev: _PaintEvents, rows: np.ndarray, ops: pl.DataFrame | None, pid: int, tid: int
) -> tuple[np.ndarray, np.ndarray]:
    """The union of one thread's graph calls and ops: when it computes."""
    g = rows[ev.graph[rows]]
    s, e = [ev.ts[g]], [ev.end[g]]
    if ops is not None and ops.height:
        mine = ops.filter((pl.col("pid") == pid) & (pl.col("tid") == tid)).drop_nulls(["ts"])
        if mine.height:
            ts = mine.get_column("ts").to_numpy().astype(np.int64)
            s.append(ts)
            e.append(ts + mine.get_column("dur").fill_null(0).clip(lower_bound=0).to_numpy().astype(np.int64))
    return interval_union(np.concatenate(s), np.concatenate(e))


def _pairs(pid: np.ndarray, tid: np.ndarray) -> list[tuple[int, int]]:
    """The distinct (pid, tid) pairs; nearly always one, found without sorting."""
    if len(pid) == 0:
        return []
    if (pid == pid[0]).all() and (tid == tid[0]).all():
        return [(int(pid[0]), int(tid[0]))]
    return sorted(set(zip(pid.tolist(), tid.tolist(), strict=True)))


# what each painting event is: its part in _PRIORITY order (a forward graph call: "forward", one run with grad
# disabled: "eval"), -1 none. `grad`: whether the frame has graph calls' grad_enabled (older traces may not)
def _code(grad: bool) -> pl.Expr:
    cat, phase = pl.col("cat"), pl.col("phase")
    is_graph = cat == GRAPH_CAT
    is_forward = (is_graph & phase.is_in(_FORWARD_PHASES)).fill_null(False)
    no_grad = (pl.col("grad_enabled") == 0).fill_null(False) if grad else pl.lit(False)
    p = _PRIORITY.index
    return (
        pl.when(cat == COMPILE_CAT).then(p("compile"))
        .when(cat.is_in([POSIX_CAT, TORCH_IO_CAT])).then(p("io"))
        .when(cat == DATA_CAT).then(p("data"))
        .when((cat == AUTOGRAD_CAT) | (is_graph & (phase == "backward")).fill_null(False)).then(p("backward"))
        .when(cat == OPTIMIZER_CAT).then(p("optimizer"))
        .when(is_forward & no_grad).then(p("eval"))
        .when(is_forward).then(p("forward"))
        .otherwise(-1).cast(pl.Int8)
    )  # fmt: skip


class _PaintEvents:
    """One file's events that paint parts, as arrays: pid, tid, ts, end, code (`_code`); the compile id of
    compile events and the file of saves and writes, read only where there are any."""

    def __init__(self, f: pl.DataFrame):
        # compared as they are (categories): no column is cast to strings
        e = f.filter(pl.col("cat").is_in(_PAINT_CATS) & pl.col("ts").is_not_null())
        cat, name = pl.col("cat"), pl.col("name")
        done = (cat == COMM_CAT) & (pl.col("dur").fill_null(0) > 0)
        if "state" in f.columns:  # a collective's issue marker (state "issued") is no time in flight
            done = done & (pl.col("state").cast(pl.String).fill_null("done") != "issued")
        e = e.select(
            pl.col("pid").fill_null(-1), pl.col("tid").fill_null(-1), pl.col("ts").cast(pl.Int64),
            (pl.col("ts") + pl.col("dur").fill_null(0).clip(lower_bound=0)).cast(pl.Int64).alias("end"),
            _code("grad_enabled" in f.columns).alias("code"),
            pl.when(cat == COMPILE_CAT).then(pl.col("compile_id").cast(pl.String)).alias("compile_id"),
            pl.when((name == "torch.save") | ((cat == POSIX_CAT) & (name == "write")))
            .then(pl.col("fname").cast(pl.String)).alias("saved"),
            done.fill_null(False).alias("comm"), (cat == GRAPH_CAT).fill_null(False).alias("graph"),
        )  # fmt: skip
        self.frame = e
        self.pid, self.tid, self.ts, self.end, self.code = (
            e.get_column(c).to_numpy() for c in ("pid", "tid", "ts", "end", "code")
        )
        self.graph = e.get_column("graph").to_numpy()
        is_comm = e.get_column("comm").to_numpy()
        self._comm: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        if is_comm.any():
            for p in np.unique(self.pid[is_comm]).tolist():
                m = is_comm & (self.pid == p)
                self._comm[int(p)] = interval_union(self.ts[m], self.end[m])
        self.one_thread = e.height == 0 or bool((self.pid == self.pid[0]).all() and (self.tid == self.tid[0]).all())
        self.has = {c: e.get_column(c).null_count() < e.height for c in ("compile_id", "saved")}

    def comm(self, pid: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The union of the process's collectives in flight (issue to completion), or None: it has none."""
        return self._comm.get(int(pid))

    def thread(self, pid: int, tid: int) -> np.ndarray | None:
        """The rows of one thread's events (None: it has none)."""
        if len(self.pid) == 0:
            return None
        if self.one_thread:
            return np.arange(len(self.pid)) if (self.pid[0], self.tid[0]) == (pid, tid) else None
        rows = np.flatnonzero((self.pid == pid) & (self.tid == tid))
        return rows if len(rows) else None


def _sorted_unique(x: np.ndarray) -> np.ndarray:
    x = np.sort(x)
    return x[np.concatenate([[True], x[1:] != x[:-1]])] if len(x) else x


def _paint_thread(
    ev: _PaintEvents, rows: np.ndarray, a: np.ndarray, b: np.ndarray,
    exposed: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """(windows, parts) µs for one thread's windows [a, b) and its painting events (`rows` of `ev`);
    `exposed`: when its process's collectives are in flight while the thread does not compute."""
    s, end, code = ev.ts[rows], ev.end[rows], ev.code[rows]
    p_of = _PRIORITY.index
    forward, evaluation = p_of("forward"), p_of("eval")
    if (code == evaluation).any() and not ((code == p_of("backward")) | (code == p_of("optimizer"))).any():
        code = np.where(code == evaluation, forward, code)  # a thread that never trains: no_grad is its forward
    intervals: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for p in np.flatnonzero(np.bincount(code.astype(np.int64) + 1, minlength=len(_PRIORITY) + 1)[1:]).tolist():
        m = code == p
        intervals[p] = (s[m], end[m])
    if forward in intervals or evaluation in intervals:
        # what ends a run of forward (eval) calls: data, backward, optimizer, I/O not inside a compile, and
        # a call of the other kind
        breaks = np.isin(code, [p_of("data"), p_of("backward"), p_of("optimizer")])
        io = code == p_of("io")
        if io.any() and p_of("compile") in intervals:
            io &= ~_inside(s, *intervals[p_of("compile")])
        breaks |= io
        for p, other in ((forward, evaluation), (evaluation, forward)):
            if p in intervals:
                cut = breaks | (code == other)
                intervals[p] = _forward_runs(*intervals[p], s[cut], end[cut])
    if exposed is not None and len(exposed[0]):
        intervals[p_of("comm")] = exposed
    bounds = _sorted_unique(np.concatenate([a, b, *(x for pair in intervals.values() for x in pair)]))
    owner = np.full(max(len(bounds) - 1, 0), _OTHER, dtype=np.int64)
    for p in sorted(intervals, reverse=True):  # lowest priority first: higher ones paint over it
        lo, hi = intervals[p]
        keep = hi > lo
        delta = np.bincount(np.searchsorted(bounds, lo[keep]), minlength=len(bounds)) - np.bincount(
            np.searchsorted(bounds, hi[keep]), minlength=len(bounds)
        )
        owner[np.cumsum(delta)[:-1] > 0] = _COLUMN_OF[p]
    length = np.diff(bounds)
    ia, ib = np.searchsorted(bounds, a), np.searchsorted(bounds, b)
    out = np.zeros((len(a), len(PARTS)), dtype=np.int64)
    for col in range(len(PARTS)):
        prefix = np.concatenate([[0], np.cumsum(np.where(owner == col, length, 0))])
        out[:, col] = prefix[ib] - prefix[ia]
    return out


def interval_union(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals [s, e) as sorted disjoint intervals (touching ones merged)."""
    if not len(s):
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    first = np.flatnonzero(np.concatenate([[True], s[1:] > reach[:-1]]))
    return s[first], np.maximum.reduceat(e, first)


def _members(us: np.ndarray, ue: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Whether each instant t lies in the sorted disjoint intervals [us, ue)."""
    k = np.searchsorted(us, t, side="right") - 1
    return (k >= 0) & (ue[np.maximum(k, 0)] > t) if len(us) else np.zeros(len(t), dtype=bool)


def _combine(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray], keep) -> tuple[np.ndarray, np.ndarray]:
    points = _sorted_unique(np.concatenate([*a, *b]).astype(np.int64))
    if len(points) < 2:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    lo, hi = points[:-1], points[1:]
    m = keep(_members(*a, lo), _members(*b, lo))
    return interval_union(lo[m], hi[m])


def intervals_and(as_, ae, bs, be) -> tuple[np.ndarray, np.ndarray]:
    """The intersection of two sorted disjoint interval sets."""
    return _combine((as_, ae), (bs, be), np.logical_and)


def intervals_minus(as_, ae, bs, be) -> tuple[np.ndarray, np.ndarray]:
    """[as_, ae) less [bs, be), both sorted and disjoint."""
    return _combine((as_, ae), (bs, be), lambda x, y: x & ~y)


def covered_in(us: np.ndarray, ue: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How much of each window [a, b) the sorted disjoint intervals [us, ue) cover (µs)."""
    if not len(us):
        return np.zeros(len(a), dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum(ue - us)])

    def before(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(us, t, side="right")  # intervals begun at or before t
        inside = np.clip(t - us[np.maximum(k - 1, 0)], 0, (ue - us)[np.maximum(k - 1, 0)])
        return cum[np.maximum(k - 1, 0)] + np.where(k > 0, inside, 0)

    return (before(np.asarray(b, dtype=np.int64)) - before(np.asarray(a, dtype=np.int64))).astype(np.int64)


def paint(layers: list[tuple[np.ndarray, np.ndarray]], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(windows, len(layers) + 1) µs: each instant of each window [a, b) charged to the first layer (a list
    of intervals [s, e), highest priority first) that covers it; the last column is what none covers."""
    bounds = _sorted_unique(np.concatenate([a, b, *(x for pair in layers for x in pair)]).astype(np.int64))
    none = len(layers)
    owner = np.full(max(len(bounds) - 1, 0), none, dtype=np.int64)
    for i in range(len(layers) - 1, -1, -1):  # lowest priority first: higher ones paint over it
        lo, hi = layers[i]
        keep = hi > lo
        if not keep.any():
            continue
        delta = np.bincount(np.searchsorted(bounds, lo[keep]), minlength=len(bounds)) - np.bincount(
            np.searchsorted(bounds, hi[keep]), minlength=len(bounds)
        )
        owner[np.cumsum(delta)[:-1] > 0] = i
    length = np.diff(bounds)
    ia, ib = np.searchsorted(bounds, a), np.searchsorted(bounds, b)
    out = np.zeros((len(a), none + 1), dtype=np.int64)
    for col in range(none + 1):
        prefix = np.concatenate([[0], np.cumsum(np.where(owner == col, length, 0))])
        out[:, col] = prefix[ib] - prefix[ia]
    return out


def _forward_runs(s: np.ndarray, e: np.ndarray, bs: np.ndarray, be: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Runs of forward graph calls [s, e): consecutive calls are one run unless a breaker [bs, be) (data,
    backward, optimizer) lies in the gap between them (starts in it, or covers its start)."""
    order = np.lexsort((e, s))
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    g0, g1 = reach[:-1], s[1:]
    cut = g1 > g0
    if len(bs) and cut.any():
        starts = np.sort(bs)
        inside = np.searchsorted(starts, g1, side="left") > np.searchsorted(starts, g0, side="left")
        us, ue = interval_union(bs, be)
        k = np.searchsorted(us, g0, side="left") - 1
        covers = (k >= 0) & (ue[np.maximum(k, 0)] > g0)
        cut &= inside | covers
    else:
        cut[:] = False
    first = np.flatnonzero(np.concatenate([[True], cut]))
    return s[first], np.maximum.reduceat(e, first)


def _compiles_in(
    ev: _PaintEvents, rows: np.ndarray, a: np.ndarray, b: np.ndarray, windows: np.ndarray, compiles: np.ndarray,
    names: list,
) -> None:
    """Count each compile id in the windows where its first compile event (on this thread) starts."""
    if not ev.has["compile_id"]:
        return
    ids = ev.frame.get_column("compile_id").gather(rows)
    known = ids.is_not_null().to_numpy()
    first: dict[str, int] = {}
    for cid, t in zip(ids.filter(known).to_list(), ev.ts[rows][known].tolist(), strict=True):
        if t < first.get(cid, t + 1):
            first[cid] = t
    for cid, t in first.items():
        for r in windows[(a <= t) & (t < b)].tolist():
            compiles[r] += 1
            names.append((r, "compile_ids", cid))


def _inside(ts: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Whether each time lies in the union of the intervals [starts, ends]."""
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], np.maximum.accumulate(ends[order])
    last = np.searchsorted(starts, ts, side="right") - 1  # the latest interval begun at or before each time
    return (last >= 0) & (ts <= ends[np.maximum(last, 0)])


def _saved_in(
    ev: _PaintEvents, rows: np.ndarray, a: np.ndarray, b: np.ndarray, windows: np.ndarray, names: list
) -> None:
    """The files saved or written (events that start in a window), each once per window; not those written
    while compiling (inductor's generated code and caches are compile, not the program's checkpoints)."""
    if not ev.has["saved"]:
        return
    files = pl.DataFrame({"saved": ev.frame.get_column("saved").gather(rows), "ts": ev.ts[rows]})
    compiling = rows[ev.code[rows] == _PRIORITY.index("compile")]
    if compiling.size:
        files = files.filter(~pl.Series(_inside(files.get_column("ts").to_numpy(), ev.ts[compiling],
                                                ev.end[compiling])))  # fmt: skip
    files = files.drop_nulls().sort("ts")
    if files.height == 0:
        return
    ts = files.get_column("ts").to_numpy()
    saved = files.get_column("saved").to_list()
    lo, hi = np.searchsorted(ts, a, side="left"), np.searchsorted(ts, b, side="left")
    for k in np.flatnonzero(hi > lo).tolist():
        names.extend((int(windows[k]), "saved", name) for name in set(saved[lo[k] : hi[k]]))
