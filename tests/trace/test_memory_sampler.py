"""The memory sampler (trace/memory.py) on its own, without torch: a session samples the process's resident
memory off the hot path, sees a planted allocation come and go, and is off with DYNASCOPE_MEMORY=0."""

from __future__ import annotations

import time

import pytest
from support.tracecheck import check, load

import dynascope
from dynascope.errors import ConfigError
from dynascope.trace import memory

pytestmark = pytest.mark.skipif(not memory.available(), reason="the sampler reads /proc/self/statm (Linux)")
PLANTED = 96 * 2**20


def _traced(tmp_path, **options) -> list[dict]:
    with dynascope.session(str(tmp_path / "t.pfw.gz"), **options) as session:
        session.memory_sampler_ready(30)
        time.sleep(0.05)
        planted = bytearray(PLANTED)  # zero-filled by the kernel on first touch: touch every page
        planted[:: 4096] = b"x" * len(planted[:: 4096])
        time.sleep(0.1)
        del planted
        time.sleep(0.1)
    return check(load(session.path))["counters"]


def test_a_session_samples_memory_and_sees_a_planted_allocation_come_and_go(tmp_path):
    samples = [(c["ts"], c["args"]["rss"]) for c in _traced(tmp_path)]
    assert len(samples) >= 3
    values = [v for _, v in samples]
    first, peak, last = values[0], max(values), values[-1]
    assert peak - first >= 0.9 * PLANTED
    assert peak - last >= 0.9 * PLANTED  # freed: mmap'd memory goes back to the system


def test_memory_off_writes_no_samples(tmp_path, monkeypatch):
    monkeypatch.setenv("DYNASCOPE_MEMORY", "0")
    assert _traced(tmp_path) == []


def test_a_too_short_interval_is_refused_in_one_line(monkeypatch):
    monkeypatch.setenv("DYNASCOPE_MEMORY_INTERVAL_US", "10")
    with pytest.raises(ConfigError, match="below 100"):
        dynascope.session()
