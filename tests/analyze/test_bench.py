"""The analysis benchmark runs end to end on a tiny trace (its numbers are not checked here)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_analysis.py"


def test_bench_analysis_small(tmp_path):
    spec = importlib.util.spec_from_file_location("bench_analysis", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "analysis.json"
    assert mod.main(["--events", "20000", "--files", "2", "--dir", str(tmp_path / "d"), "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    variants = {r["variant"]: r for r in res["rows"]}
    assert len(variants) == 4
    counts = {r["events"] for r in res["rows"]}
    assert len(counts) == 1  # every variant saw the same events
    assert res["op_events"] == 2 * (10000 // 60) * 60
