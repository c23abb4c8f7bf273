"""Byte-level fast path for the op events of dynascope's own traces (docs/trace-format.md).

Op events are the bulk of a trace and are all written by one template (trace/decode.py `_template`):

    {"name":NAME,"cat":"dynamo","pid":P,"tid":T,"ph":"X","args":{"grad_enabled":G,"level":L,"p_idx":PARENT},"id":ID,"ts":TS,"dur":DUR}

Their identity needs no JSON parsing: op k of a graph call has id = p_idx + 1 + k, and its attribution
is the OH record with graph_op = the parent graph event's `op` and index = k. Per chunk of inflated text
this module finds such lines with numpy (newlines, colons counted from each line's end, fixed byte
windows compared as unaligned 64-bit words), parses their integers vectorised, and hands them to the
summaries' op reducer already aggregated, in exactly the shape the general reader's rows would have
given it. Every other line (metadata, graph calls, regions, compile events, anything of another layout)
goes through the general reader unchanged, so the Partial is identical to `summarize._file_partial_general`.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import orjson
import polars as pl

from . import reader as _reader
from ..errors import TraceFormatError

__all__ = ["file_partial_fast"]

# below this many lines in a chunk (or this share of matching lines) the general reader takes the chunk
_MIN_LINES = 256
_MIN_SHARE = 0.5

# fixed windows, each ending at a colon counted from the line end (c1 = dur's colon ... c10 = pid's)
_P_NAME = b'{"name":"'
_P_CAT_PID = b'","cat":"dynamo","pid":'  # ends at c10
_P_TID = b',"tid":'  # c9
_P_ARGS = b',"ph":"X","args":{"grad_enabled":'  # c6 (c8, c7 inside)
_P_LEVEL = b',"level":'  # c5
_P_PIDX = b',"p_idx":'  # c4
_P_ID = b'},"id":'  # c3
_P_TS = b',"ts":'  # c2
_P_DUR = b',"dur":'  # c1


def _words(buf: bytes) -> np.ndarray:
    """Every unaligned little-endian 64-bit word of buf: words[i] = bytes i..i+7."""
    return np.ndarray((len(buf) - 7,), dtype="<u8", buffer=buf, offset=0, strides=(1,))


def _match_end(w: np.ndarray, ends: np.ndarray, pat: bytes) -> np.ndarray:
    """pat occupies the bytes ending at (inclusive) each of `ends`."""
    n = len(pat)
    if n >= 8:
        start = ends - (n - 1)
        ok = np.ones(len(ends), dtype=bool)
        for off in list(range(0, n - 7, 8)) + [n - 8]:
            ok &= w[start + off] == np.uint64(int.from_bytes(pat[off : off + 8], "little"))
        return ok
    mask = np.uint64(((1 << (8 * n)) - 1) << (8 * (8 - n)))
    want = np.uint64(int.from_bytes(b"\0" * (8 - n) + pat, "little"))
    return (w[ends - 7] & mask) == want


_ONES = 0x0101010101010101
_ZEROS = np.uint64(0x30 * _ONES)
_HIGH = np.uint64(0xF0 * _ONES)
_SIX = np.uint64(0x06 * _ONES)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


def _swar8(word: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Up to 8 decimal digits in the high `length` bytes of each little-endian word (SWAR)."""
    shift = ((8 - length) * 8).astype(np.uint64)
    low = np.where(length > 0, (np.uint64(1) << np.minimum(shift, np.uint64(63))) - np.uint64(1), _ALL)
    low = np.where(length >= 8, np.uint64(0), low)
    v = (word & ~low) | (_ZEROS & low)  # bytes before the number read as leading '0's
    ok = ((v & _HIGH) == _ZEROS) & (((v + _SIX) & _HIGH) == _ZEROS)
    v = v - _ZEROS
    v = (v * np.uint64(10) + (v >> np.uint64(8))) & np.uint64(0x00FF00FF00FF00FF)
    v = (v * np.uint64(100) + (v >> np.uint64(16))) & np.uint64(0x0000FFFF0000FFFF)
    v = (v * np.uint64(10000) + (v >> np.uint64(32))) & np.uint64(0xFFFFFFFF)
    return v.astype(np.int64), ok


def _ints(w: np.ndarray, lo: np.ndarray, hi: np.ndarray, wide: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The decimal integers in buf[lo:hi] per row (up to 16 digits; 8 unless `wide`), and whether each
    is a well-formed non-negative number (digits only)."""
    length = hi - lo
    ok = (length >= 1) & (length <= (16 if wide else 8))
    low_len = np.clip(length, 0, 8)
    vals, k = _swar8(w[hi - 8], low_len)
    ok &= k
    if wide and (length > 8).any():
        high_len = np.clip(length - 8, 0, 8)
        hv, k2 = _swar8(w[hi - 16], high_len)
        ok &= k2 | (high_len == 0)
        vals = vals + hv * 100_000_000
    return vals, ok


class _Ops:
    """Op lines of one chunk, found and parsed; `rest` is every other line of the chunk."""

    def __init__(self, chunk: bytes):
        self.n = 0
        self.rest = chunk
        if len(chunk) < 4096:
            return
        a = np.frombuffer(chunk, dtype=np.uint8)
        nl = np.flatnonzero(a == 10)
        if len(nl) < _MIN_LINES:
            return
        starts = np.empty_like(nl)
        starts[0] = 0
        starts[1:] = nl[:-1] + 1
        cand = np.flatnonzero((nl - starts >= 100) & (a[nl - 1] == 125))  # '}'
        if len(cand) < _MIN_SHARE * len(nl):
            return
        c = np.flatnonzero(a == 58)
        j = np.searchsorted(c, nl[cand])
        js = np.searchsorted(c, starts[cand])
        keep = j - js >= 11
        cand, j = cand[keep], j[keep]
        s = starts[cand]
        e = nl[cand]
        cs = [None] + [c[j - i] for i in range(1, 11)]  # cs[i]: the i-th colon from the line end
        w = _words(chunk)
        ok = cs[10] - 22 > s + 8
        ok &= _match_end(w, s + 8, _P_NAME)
        ok &= _match_end(w, cs[10], _P_CAT_PID)
        ok &= _match_end(w, cs[9], _P_TID)
        ok &= _match_end(w, cs[6], _P_ARGS)
        ok &= _match_end(w, cs[5], _P_LEVEL)
        ok &= _match_end(w, cs[4], _P_PIDX)
        ok &= _match_end(w, cs[3], _P_ID)
        ok &= _match_end(w, cs[2], _P_TS)
        ok &= _match_end(w, cs[1], _P_DUR)
        ok &= cs[5] - 8 == cs[6] + 2  # grad_enabled: one digit
        g = a[cs[6] + 1]
        ok &= (g == 48) | (g == 49)
        sel = np.flatnonzero(ok)
        cand, s, e = cand[sel], s[sel], e[sel]
        cs = [None] + [x[sel] for x in cs[1:]]
        pid, k1 = _ints(w, cs[10] + 1, cs[9] - 6)
        tid, k2 = _ints(w, cs[9] + 1, cs[6] - 32)
        level, k3 = _ints(w, cs[5] + 1, cs[4] - 8, wide=False)
        # a negative p_idx (an op at top level, no graph call) fails here: the general reader takes it
        p_idx, k4 = _ints(w, cs[4] + 1, cs[3] - 6)
        ident, k5 = _ints(w, cs[3] + 1, cs[2] - 5)
        ts, k6 = _ints(w, cs[2] + 1, cs[1] - 6)
        dur, k7 = _ints(w, cs[1] + 1, e - 1)
        good = k1 & k2 & k3 & k4 & k5 & k6 & k7 & (ident > p_idx)
        sel = np.flatnonzero(good)
        if len(sel) < _MIN_SHARE * len(nl):
            return
        self.n = len(sel)
        self.pid, self.tid, self.p_idx, self.ident = pid[sel], tid[sel], p_idx[sel], ident[sel]
        self.ts, self.dur = ts[sel], dur[sel]
        self.name_lo = s[sel] + 8
        self.name_hi = cs[10][sel] - 21
        self.chunk = chunk
        fast = np.zeros(len(nl), dtype=bool)
        fast[cand[sel]] = True
        self.rest = _other_lines(chunk, starts, nl, fast)


def _other_lines(chunk: bytes, starts: np.ndarray, nl: np.ndarray, fast: np.ndarray) -> bytes:
    """The lines of chunk not marked fast (and any text after the last newline), joined."""
    slow = ~fast
    # runs of consecutive slow lines: copy each run in one slice
    edges = np.flatnonzero(np.diff(np.concatenate(([False], slow, [False])).astype(np.int8)))
    run_start, run_end = edges[0::2], edges[1::2]
    parts = [chunk[a:b] for a, b in zip(starts[run_start].tolist(), (nl[run_end - 1] + 1).tolist())]
    tail = int(nl[-1]) + 1
    if tail < len(chunk):
        parts.append(chunk[tail:])
    return b"".join(parts)


class _FastReducer:
    """Feeds the op reducer of the summaries (`summarize._OpReducer`) with pre-aggregated fast ops."""

    def __init__(self, red):
        self.red = red
        self.names: dict[tuple, str] = {}
        self.count = 0

    def add(self, ops: _Ops) -> None:
        if not ops.n:
            return
        self.count += ops.n
        k = ops.ident - ops.p_idx - 1
        frame = pl.DataFrame(
            {"pid": ops.pid, "p_idx": ops.p_idx, "__k": k, "dur": ops.dur, "__row": np.arange(ops.n, dtype=np.int64)}
        )
        gmap = self.red._graph_map()
        frame = frame.join(gmap, on=["pid", "p_idx"], how="left")
        frame = frame.with_columns(
            pl.when(pl.col("__gop").is_null()).then(pl.col("p_idx")).otherwise(None).alias("__pend")
        )
        hist = frame.group_by(["pid", "__gop", "__k", "__pend", "dur"]).agg(
            pl.len().cast(pl.Int64).alias("n"), pl.col("__row").first()
        )
        # the name is the same for every event of one (pid, graph, k): read it once per spec
        specs = hist.group_by(["pid", "__gop", "__k", "__pend"]).agg(pl.col("__row").first())
        names = []
        chunk = ops.chunk
        lo, hi = ops.name_lo, ops.name_hi
        for pid, gop, kk, pend, row in specs.iter_rows():
            key = (pid, gop, kk, pend)
            name = self.names.get(key)
            if name is None:
                name = orjson.loads(chunk[int(lo[row]) : int(hi[row])])
                if gop is not None:  # pending keys are one graph call's: not worth keeping
                    self.names[key] = name
            names.append(name)
        specs = specs.drop("__row").with_columns(pl.Series("name", names, dtype=pl.String))
        hist = hist.drop("__row").join(specs, on=["pid", "__gop", "__k", "__pend"], how="left", nulls_equal=True)
        hist = hist.select(
            "pid", "name", pl.lit("dynamo", dtype=pl.String).alias("cat"), "dur", "__gop", "__k", "__pend", "n"
        )
        self.red.hists.append(hist)
        self.red.times.append(pl.DataFrame({"pid": ops.pid, "tid": ops.tid, "ts": ops.ts, "dur": ops.dur}))


def read_fast(path: str | os.PathLike, columns: list[str], reducer):
    """`reader.read_file_state(path, columns=columns, reducer=reducer)` with op lines taken by the fast
    path. Returns None when the file is not line-oriented (a JSON document): use the general reader."""
    path = Path(path)
    name = str(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceFormatError(f"{name}: cannot be read ({exc.strerror}); check the path") from None
    if not data.strip():
        return None
    state = _reader._FileState(name, columns)
    state.reducer = reducer
    chunks = _reader._text_chunks(data, state)
    first = next(chunks, None)
    if first is None:
        return None
    mode = state.mode = _reader._sniff(first, name)
    if mode == "document":
        return None
    fast = _FastReducer(reducer)
    template = None
    attempts = 0
    for chunk in _reader._chain([first], chunks):
        ops = _Ops(chunk)
        rest = ops.rest
        if rest.strip():
            if (template is None or state.misfit > 0.25) and attempts < 8:
                attempts += 1
                template = _reader._Template.learn(rest) or template
            state.parse_chunk(rest, template)
        fast.add(ops)  # after the chunk's graph calls were seen
        del ops
    state.seen_objects += fast.count
    state.reduced += fast.count
    state.check_is_trace()
    frame = state.finish(columns)
    return frame, state.info(), state


def file_partial_fast(path: str | os.PathLike):
    """summarize.file_partial through the fast path (same Partial)."""
    from .summarize import SUMMARY_COLUMNS, _OpReducer, _core, _ensure, _file_partial_general

    red = _OpReducer()
    res = read_fast(path, SUMMARY_COLUMNS, red)
    if res is None:
        return _file_partial_general(path)
    others, info, state = res
    hist, times = red.result(state)
    return _core(hist, times, _ensure(others), info)
