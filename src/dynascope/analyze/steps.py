"""Step attribution: which user region each op event belongs to.

An op belongs to the innermost user region that has an `epoch` or `step` arg on the same (pid, tid) and
whose [ts, ts+dur] interval contains the op's start. Each thread's time is cut at every region boundary
into segments owned by their innermost region; one compiled pass over the ops (`_scan.count_in_segments`)
counts them in their segments, with no sort of the ops and no join.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

import numpy as np
import polars as pl

from dynascope.analyze.read.columns import NON_REGION_CATS

__all__ = ["TIME_COLUMNS", "innermost_segments", "ops_per_region", "regions"]

# an op's times, as the step attribution of one file needs them
TIME_COLUMNS = ["pid", "tid", "ts", "dur"]


def regions(f: pl.DataFrame) -> pl.DataFrame:
    """The rows of `f` that are user regions with an epoch or a step."""
    return f.filter(
        ~pl.col("cat").cast(pl.String).is_in(NON_REGION_CATS)
        & (pl.col("epoch").is_not_null() | pl.col("step").is_not_null())
    )


def ops_per_region(regions: pl.DataFrame, ops: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(op_us, op_count) per region row: each op counted in the innermost region that covers its start,
    on its own thread. One compiled pass over the ops per thread, along its segments: no sort of the
    ops (millions of them) and no join."""
    from dynascope.analyze.read._scan import count_in_segments

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
    """(pid, tid) -> that thread's elementary segments (see `innermost_segments`); regions are numbered
    by their row."""
    r = regions.with_row_index("rid").drop_nulls(["pid", "tid", "ts", "dur"])
    segments = {}
    for thread, grp in r.group_by(["pid", "tid"], maintain_order=True):
        starts = grp.get_column("ts").to_numpy()
        ends = starts + grp.get_column("dur").to_numpy()
        segments[thread] = innermost_segments(grp.get_column("rid").cast(pl.Int64).to_numpy(), starts, ends)
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


def innermost_segments(rids: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Split a thread's time at every region boundary; each piece [b, next b) gets the innermost region
    covering it (latest start, then earliest end, then highest rid), or -1. Regions cover the closed
    interval [ts, ts + dur]. Returns (the sorted piece starts b, their regions). O(R log R)."""
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
    """innermost_segments when no two regions overlap (steps one after another): each covers itself,
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
