"""Reading a file as events and groups (analyze/read/grouped.py, what the converter writes from) gives the
same rows and values as reading it whole (`read_file`), on every file of the shared fixture set and on
a multi-chunk trace read through the fast path."""

from __future__ import annotations

import warnings

import polars as pl
import pytest
from support.trace_fixtures import CASE_IDS, CASES, ours, write_case

from dynascope.analyze.read import lines, reader
from dynascope.analyze.read.grouped import read_file_grouped
from dynascope.analyze.read.reader import read_file

PER_EVENT = ("name", "tid", "id", "ts", "dur", "p_idx", "level")


def _rebuilt(path) -> pl.DataFrame:
    """The grouped read's events, each with its group's columns, as plain text for comparison."""
    read = read_file_grouped(path, per_event=PER_EVENT)
    groups = read.groups.with_row_index("group")
    return read.events.join(groups, on="group", how="left").drop("group")


def _as_text(frame: pl.DataFrame, columns: list[str]) -> list[tuple]:
    text = frame.select([pl.col(c).cast(pl.String) if c in frame.columns else pl.lit(None, dtype=pl.String).alias(c) for c in columns])
    return sorted(text.rows(), key=repr)


def _assert_same_rows(path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole, _ = read_file(path)
        grouped = _rebuilt(path)
    # op: the whole read keeps an OH reference's hash text as written; both name the same record
    columns = [c for c in whole.columns if c not in ("op",)]
    assert grouped.height == whole.height
    assert _as_text(grouped, columns) == _as_text(whole, columns)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_grouped_read_gives_the_rows_of_the_whole_read(tmp_path, case):
    _assert_same_rows(write_case(case, tmp_path))


def test_grouped_read_resolves_op_events_through_their_graph_call(tmp_path, monkeypatch):
    """Many chunks, the line templates (fast path) and op events that name no OH record: each op event
    gets the layer of op k of its graph call, as the whole read gives it."""
    monkeypatch.setattr(lines, "CHUNK_BYTES", 2048)
    monkeypatch.setattr(reader, "FAST_MIN_LINES", 4)
    path = tmp_path / "t-31.pfw"
    path.write_text("".join(__import__("orjson").dumps(e).decode() + "\n" for e in ours(calls=200)))
    _assert_same_rows(path)
    read = read_file_grouped(path, per_event=PER_EVENT)
    layers = read.events.join(read.groups.with_row_index("group"), on="group").filter(pl.col("cat") == "dynamo")
    assert layers.get_column("layer").cast(pl.String).value_counts().sort("layer").rows() == [("act", 200), ("fc", 200)]
    # 400 op events from two groups (op 0 and op 1 of the graph); each step region is its own (its `step`)
    assert read.groups.filter(pl.col("cat") == "dynamo").height == 2
