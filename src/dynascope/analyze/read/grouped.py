"""One file read as events and groups, for writers that emit every event (the Chrome converter).

Rows that are equal in every column but the per-event ones (times, ids, names) share a group; each
group is resolved once (attribution, host, process facts). The reading keeps, per chunk, only the
per-event columns and a group number, so the memory is a few narrow columns per event, never the wide
resolved frame (a million op events come from a few hundred groups).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from dynascope.analyze.read.columns import dict_columns_frame, empty_frame
from dynascope.analyze.read.reader import FileReader, read_file_reduced
from dynascope.analyze.read.readinfo import ReadInfo
from dynascope.analyze.read.resolve import norm_hash, op_refs
from dynascope.trace.format import GRAPH_CAT

__all__ = ["GroupedRead", "read_file_grouped"]

@dataclass
class GroupedRead:
    events: pl.DataFrame  # the per-event columns the file has, and `group` (a row number of `groups`)
    groups: pl.DataFrame  # every other column, resolved; one row per group
    info: ReadInfo


def read_file_grouped(path: str | os.PathLike, *, per_event: Sequence[str], keep_marks: bool = False) -> GroupedRead:
    """Read one file as events and resolved groups; `per_event` names the columns that vary from event
    to event, every other column belongs to the group."""
    grouping = _Grouping(per_event)
    _, info, reader = read_file_reduced(path, reducer=grouping, keep_marks=keep_marks)
    events = (
        pl.concat(grouping.events, how="diagonal_relaxed")
        if grouping.events
        else pl.DataFrame(schema={"group": pl.UInt32})
    )
    groups = dict_columns_frame(_columns_of(grouping.rows)) if grouping.rows else empty_frame(None)
    if reader.tables.oh_index and {"p_idx", "id"} <= set(events.columns):
        events, groups = _with_op_refs(events, groups, reader)
    return GroupedRead(events, reader.resolve_frame(groups), info)


class _Grouping:
    """A chunk reducer that keeps each row's per-event columns and group number, and each group's row."""

    def __init__(self, per_event: Sequence[str]):
        self.per_event = per_event
        self.events: list[pl.DataFrame] = []
        self.rows: list[dict[str, Any]] = []  # group number -> its columns (non-null ones)
        self._numbers: dict[tuple, int] = {}

    def observe(self, frame: pl.DataFrame) -> None:
        pass

    def __call__(self, frame: pl.DataFrame) -> pl.DataFrame:
        own = [c for c in self.per_event if c in frame.columns]
        keys = [c for c in frame.columns if c not in own]
        local = group_ids(frame, keys)
        firsts = _first_rows(local)
        numbers = [self._number(row) for row in frame.select(pl.col(keys).gather(firsts)).iter_rows(named=True)]
        group = pl.Series("group", numbers, dtype=pl.UInt32).gather(local)
        self.events.append(frame.select(own).with_columns(group))
        return frame.clear()

    def _number(self, row: dict[str, Any]) -> int:
        key = tuple((k, v) for k, v in row.items() if v is not None)
        number = self._numbers.get(key)
        if number is None:
            number = self._numbers[key] = len(self.rows)
            self.rows.append(dict(key))
        return number


def group_ids(frame: pl.DataFrame, keys: Sequence[str]) -> pl.Series:
    """0..n-1 per distinct combination of `keys` (nulls equal), one column at a time: a narrow integer
    column is all that is ever held, not a struct of every key column."""
    group = pl.Series("group", [0] * frame.height, dtype=pl.UInt64)
    for key in keys:
        column = frame.get_column(key)
        if column.dtype in (pl.String, pl.Categorical):  # string codes: no sort of the strings
            column = column.cast(pl.Categorical).to_physical().cast(pl.UInt64) + 1
        codes = column.rank("dense").fill_null(0).cast(pl.UInt64)
        combined = group * (codes.max() + 1) + codes  # group < rows, codes <= rows: no overflow below 2**32 rows
        group = combined.rank("dense").cast(pl.UInt64) - 1
    return group.cast(pl.UInt32).alias("group")


def _first_rows(group: pl.Series) -> pl.Series:
    """The row where each group 0, 1, ... first appears."""
    firsts = group.arg_unique()
    return firsts.gather(group.gather(firsts).arg_sort())


def _columns_of(rows: list[dict[str, Any]]) -> dict[str, list]:
    names = list(dict.fromkeys(k for row in rows for k in row))
    return {k: [row.get(k) for row in rows] for k in names}


def _with_op_refs(events: pl.DataFrame, groups: pl.DataFrame, reader: FileReader) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Op events that name no OH record get their reference from their parent graph call. It depends on
    the event's ids, so an op event's group splits by the reference it gets."""
    group = events.get_column("group")
    facts = groups.select(
        pl.col("pid").cast(pl.Int64) if "pid" in groups.columns else pl.lit(None, dtype=pl.Int64).alias("pid"),
        pl.when((_col(groups, "cat") == GRAPH_CAT) & _col(groups, "op").is_not_null())
        .then(norm_hash_or_null(groups)).cast(pl.Categorical).alias("graph_op"),
        ((_col(groups, "cat") == "dynamo") & _col(groups, "op").is_null()).fill_null(False).alias("needs_ref"),
    )
    ids = [events.get_column("p_idx"), events.get_column("id")]
    narrow = pl.DataFrame([*(facts.get_column(c).gather(group) for c in facts.columns), *ids])
    ref = op_refs(narrow, reader.tables)
    del narrow
    split = group_ids(pl.DataFrame([group, ref]), ["group", "op"])
    firsts = _first_rows(split)
    own_ref = ref.gather(firsts).cast(pl.String)
    groups = groups.select(pl.all().gather(group.gather(firsts)))
    op = pl.coalesce(pl.col("op").cast(pl.String), pl.lit(own_ref)) if "op" in groups.columns else pl.lit(own_ref)
    return events.with_columns(split), groups.with_columns(op.alias("op"))


def _col(frame: pl.DataFrame, name: str) -> pl.Expr:
    return pl.col(name) if name in frame.columns else pl.lit(None, dtype=pl.String)


def norm_hash_or_null(groups: pl.DataFrame) -> pl.Expr:
    return norm_hash("op", groups) if "op" in groups.columns else pl.lit(None, dtype=pl.String)
