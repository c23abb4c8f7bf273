"""Fixtures for the render tests; the data builders live in render_fixtures.py (a unique module name)."""

from __future__ import annotations

from pathlib import Path

import pytest
from render_fixtures import build_trace, make_summary

from dynascope.analyze.summary import Summary


@pytest.fixture
def summary() -> Summary:
    return make_summary()


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    return build_trace().write(tmp_path / "train-4242.pfw.gz")


@pytest.fixture
def two_rank_traces(tmp_path: Path) -> list[Path]:
    d = tmp_path / "ranks"
    d.mkdir()
    return [build_trace(pid=5000 + r, rank=r).write(d / f"train-{5000 + r}.pfw.gz") for r in range(2)]
