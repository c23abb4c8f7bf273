"""The reader, the converter and the report agree on every file of the shared fixture set
(tests/support/trace_fixtures.py): every row `read_trace` returns is in the Chrome-trace export (complete events
as slices, `start`/`end` as process instants) and nothing else is a slice; the report counts the same
events and the same skipped lines."""

from __future__ import annotations

import gzip
import json
import warnings
from collections import Counter

import polars as pl
import pytest
from support.trace_fixtures import CASE_IDS, CASES, write_case

from dynascope.analyze.read.reader import read_trace_with_info
from dynascope.render._analysis import summarize_paths
from dynascope.render.chrome import convert


def _exported(path):
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if path.name.endswith(".gz") else raw)["traceEvents"]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_reader_converter_and_report_agree(tmp_path, case):
    path = write_case(case, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frame, info = read_trace_with_info(path)
    stats = convert([path], tmp_path / "out.json")
    summary = summarize_paths([path])

    rows = frame.select(pl.col("name").cast(pl.String), "ts").rows()
    events = _exported(tmp_path / "out.json")
    slices = [(e["name"], e["ts"]) for e in events if e["ph"] == "X"]
    markers = [(e["name"], e["ts"]) for e in events if e["ph"] == "i" and e.get("s") == "p"]
    assert Counter(slices) + Counter(markers) == Counter(rows)
    assert stats.events + stats.markers == frame.height == info.events == summary.meta["events"]
    assert stats.bad_lines == info.dropped_lines == summary.meta["dropped_lines"]
    assert stats.truncated == info.truncated
    assert stats.warnings[: len(info.warnings)] == info.warnings == summary.meta["warnings"]
