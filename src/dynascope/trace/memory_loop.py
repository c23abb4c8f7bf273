"""The memory sampler's compiled loop (trace/memory.py): reads the resident set size from /proc/self/statm
every interval for one batch, without the GIL, keeping the samples that matter. Compiled once per machine
(`cache=True` keeps the machine code beside this file)."""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from numba import types

CLOCK_MONOTONIC = 1  # the clock of time.perf_counter_ns on Linux
# C library functions, linked by name (so that numba can cache the loop's machine code)
_pread: Any = types.ExternalFunction("pread", types.intp(types.int32, types.voidptr, types.uintp, types.int64))
_clock_gettime: Any = types.ExternalFunction("clock_gettime", types.int32(types.int32, types.voidptr))
_usleep: Any = types.ExternalFunction("usleep", types.int32(types.uint32))


@numba.njit(nogil=True, cache=True)
def _now(clock):
    _clock_gettime(CLOCK_MONOTONIC, clock.ctypes.data)
    return clock[0] * 1_000_000_000 + clock[1]


@numba.njit(nogil=True, cache=True)
def _rss(fd, scratch, page):
    """The second field of statm (resident pages) in bytes, or -1."""
    n = _pread(fd, scratch.ctypes.data, scratch.size, 0)
    i = 0
    while i < n and scratch[i] != 32:
        i += 1
    i += 1
    if i >= n:
        return -1
    value = 0
    while i < n and 48 <= scratch[i] <= 57:
        value = value * 10 + (scratch[i] - 48)
        i += 1
    return value * page


@numba.njit(nogil=True, cache=True)
def sample(fd, scratch, times, values, state, interval_ns, step_bytes, batch_ns, keep_ns, stop):
    """Sample for one batch (or until stop[0]); returns how many samples were kept into times/values, or -1.

    A sample is kept when it moved by at least `step_bytes` from the last one kept (state[0]), or
    `keep_ns` passed since that one (state[1]); the batch's highest sample is kept too, in time order."""
    clock = np.zeros(2, dtype=np.int64)
    start = _now(clock)
    kept = 0
    best_value, best_time, best_kept = np.int64(-1), np.int64(0), True
    while True:
        now = _now(clock)
        value = _rss(fd, scratch, state[2])
        if value < 0:
            return -1
        if state[0] < 0 or abs(value - state[0]) >= step_bytes or now - state[1] >= keep_ns:
            if not best_kept and best_value > value:  # the batch's peak so far, before this one
                times[kept], values[kept] = best_time, best_value
                kept += 1
            times[kept], values[kept] = now, value
            kept += 1
            state[0], state[1] = value, now
            best_value, best_time, best_kept = value, now, True
        elif value > best_value or best_kept:
            best_value, best_time, best_kept = value, now, False
        if stop[0] or now - start >= batch_ns or kept >= times.size - 2:
            break
        _usleep(max(1, interval_ns // 1000))
    if not best_kept and best_value > state[0]:
        times[kept], values[kept] = best_time, best_value
        kept += 1
    return kept
