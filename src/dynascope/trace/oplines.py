"""Compiled formatter: graph-call and op-event lines straight from the raw int stream.

The bulk of a trace is op events, and formatting them is most of the writer's work. This loop walks
a run of the hot path's ints once and writes finished lines into a byte buffer:

    -gid, t_start, t_1 .. t_N     one call of graph `gid`: a graph event, then N op events

Each line is a cached head (the spec's static part up to `level`, built by the Decoder) followed by
the tail that layout.py defines:

    ,"p_idx":P},"id":I,"ts":T,"dur":D}\\n

It runs without the GIL (numba, `nogil`), so the traced program keeps running on the other core, and
is compiled once per machine (`cache=True` keeps the machine code beside this file).
"""

from __future__ import annotations

import numba
import numpy as np

from dynascope.trace import forklock
from dynascope.trace import format as layout

DONE, BUFFER_FULL, HELD = 0, 1, 2  # why `format_calls` stopped
LINE_TAIL_MAX = 128  # bytes after a head: the literals below and four integers of up to 20 digits and a sign

_P_IDX, _ID, _TS, _DUR, _END = (
    np.frombuffer(text.encode(), dtype=np.uint8)
    for text in (layout.P_IDX, layout.ID, layout.TS, layout.DUR, layout.END)
)
_POWERS_OF_TEN = np.array([10**k for k in range(19)], dtype=np.int64)
_DIGIT_PAIRS = np.frombuffer(b"".join(b"%02d" % i for i in range(100)), dtype=np.uint8)


@numba.njit(nogil=True, cache=True, inline="always")
def _copy(out, pos, src, start, length):
    # Unsigned indices: numba then skips its negative-index wraparound, and the loop vectorises
    # (several times faster than a slice assignment).
    at, first = np.uint64(pos), np.uint64(start)
    for k in range(np.uint64(length)):
        out[at + k] = src[first + k]
    return pos + length


@numba.njit(nogil=True, cache=True, inline="always")
def _put(out, pos, src):
    return _copy(out, pos, src, 0, src.size)


@numba.njit(nogil=True, cache=True, inline="always")
def _put_int(out, pos, value):
    if value < 0:
        out[pos] = 45  # "-"
        pos += 1
        value = -value
    digits = 1
    while digits < 19 and value >= _POWERS_OF_TEN[digits]:
        digits += 1
    end = pos + digits
    at = end
    while value >= 100:  # two digits per division
        pair = value % 100
        value //= 100
        at -= 2
        out[at] = _DIGIT_PAIRS[2 * pair]
        out[at + 1] = _DIGIT_PAIRS[2 * pair + 1]
    if value >= 10:
        out[at - 2] = _DIGIT_PAIRS[2 * value]
        out[at - 1] = _DIGIT_PAIRS[2 * value + 1]
    else:
        out[at - 1] = 48 + value
    return end


@numba.njit(nogil=True, cache=True, inline="always")
def _line(out, pos, heads, head_starts, spec, p_idx, event_id, start_ns, end_ns, offset_ns):
    pos = _copy(out, pos, heads, head_starts[spec], head_starts[spec + 1] - head_starts[spec])
    ts = (start_ns + offset_ns) // 1000
    pos = _put(out, pos, _P_IDX)
    pos = _put_int(out, pos, p_idx)
    pos = _put(out, pos, _ID)
    pos = _put_int(out, pos, event_id)
    pos = _put(out, pos, _TS)
    pos = _put_int(out, pos, ts)
    pos = _put(out, pos, _DUR)
    pos = _put_int(out, pos, (end_ns + offset_ns) // 1000 - ts)
    return _put(out, pos, _END)


@numba.njit(nogil=True, cache=True)
def format_calls(values, begin, graph_spec, op_base, n_ops, heads, head_starts, max_head,
                 parent, next_id, offset_ns, hold_tail, out):  # fmt: skip
    """Format the graph calls in values[begin:] into `out`.

    Returns (why it stopped, index reached, bytes written, next id, events written, readings dropped).
    It stops early, at a call header, when `out` cannot hold the next call (BUFFER_FULL: empty the
    buffer and call again from the index reached), or when the last call is incomplete and
    `hold_tail` (HELD: keep values[index:] for the next drain). Graph ids outside the table, and
    readings beyond a call's op count or before any header, are dropped and counted.
    """
    n = values.size
    i = begin
    pos = 0
    events = 0
    dropped = 0
    line_max = max_head + LINE_TAIL_MAX
    while i < n and values[i] >= 0:  # readings with no call to belong to
        dropped += 1
        i += 1
    while i < n:
        gid = -values[i]
        j = i + 1
        while j < n and values[j] >= 0:
            j += 1
        readings = j - i - 1
        known = 0 < gid < n_ops.size
        ops = n_ops[gid] if known else 0
        if j == n and hold_tail and readings < ops + 1:
            return HELD, i, pos, next_id, events, dropped
        if not known or readings == 0:
            dropped += readings
            i = j
            continue
        used = min(readings, ops + 1)  # the start reading, then one per op that ran
        if pos + used * line_max > out.size:
            return BUFFER_FULL, i, pos, next_id, events, dropped
        dropped += readings - used
        graph_id = next_id
        pos = _line(out, pos, heads, head_starts, graph_spec[gid], parent, graph_id,
                    values[i + 1], values[i + used], offset_ns)  # fmt: skip
        base = op_base[gid]
        for k in range(used - 1):
            pos = _line(out, pos, heads, head_starts, base + k, graph_id, graph_id + 1 + k,
                        values[i + 1 + k], values[i + 2 + k], offset_ns)  # fmt: skip
        next_id += used
        events += used
        i = j
    return DONE, i, pos, next_id, events, dropped


# numba compiles under a process-wide lock: a fork waits for the compile to finish (trace/forklock.py).
compile_lock = forklock.lock


def warm_up() -> None:
    """Compile (or load from the on-disk cache) before the first real drain."""
    with compile_lock:
        _run_once()


def _run_once() -> None:
    heads = np.frombuffer(b"{g{o", dtype=np.uint8)
    starts = np.array([0, 2, 4], dtype=np.int64)
    table = (np.array([-1, 0], dtype=np.int64), np.array([0, 1], dtype=np.int64), np.array([0, 1], dtype=np.int64))
    values = np.array([-1, 1000, 2000], dtype=np.int64)
    format_calls(values, 0, *table, heads, starts, 2, -1, 2, 0, False, np.empty(1024, dtype=np.uint8))
