"""Byte-level fast path for the op events of dynascope's own traces (docs/trace-format.md).

Op events are the bulk of a trace and are all written by one template (trace/decode.py `_template`):

    {"name":NAME,"cat":"dynamo","pid":P,"tid":T,"ph":"X","args":{"grad_enabled":G,"level":L,"p_idx":PARENT},"id":ID,"ts":TS,"dur":DUR}

Their identity needs no JSON parsing: op k of a graph call has id = p_idx + 1 + k, and its attribution
is the OH record with graph_op = the parent graph event's `op` and index = k. Per chunk of inflated text,
1 MB block by block, this module finds such lines and the graph-call lines with numpy (newlines and
colons in one pass; colons counted from each line's end, every colon of the line accounted for; fixed
byte windows compared as unaligned 64-bit words), parses their integers vectorised (SWAR on 8-byte
words), and hands them over already aggregated: op events as a histogram over (pid, graph op, k, dur) in
exactly the shape the summaries' op reducer (`summarize._OpReducer`) builds from the general reader's
rows, graph calls as rows. Every other line (metadata, regions, compile events, ops at top level, lines
of any other layout) goes through the general reader unchanged, so the Partial is identical to
`summarize._file_partial_general` (tests/analyze/test_fastpath.py).

Assumes what the writer guarantees: within a file, every op of one (graph op, k) has the same name (the
name is read once per spec), and a graph call's id is unique.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import orjson
import polars as pl

from . import _inflate
from . import reader as _reader
from ..errors import TraceFormatError

__all__ = ["file_partial_fast"]

# below this many lines in a chunk (or this share of matching lines) the general reader takes the chunk
_MIN_LINES = 256
_MIN_SHARE = 0.5
_MIN_BYTES = 4096

# fixed windows, each ending at a colon counted from the line end (c1 = dur's colon, c2 = ts's, ...)
_P_NAME = b'{"name":'  # at the line start
_P_DUR = b',"dur":'  # c1
_P_TS = b',"ts":'  # c2
_P_ID = b'},"id":'  # c3
_P_PIDX = b',"p_idx":'  # c4
_P_LEVEL = b',"level":'  # c5
# op lines: c6 grad_enabled (c7 args, c8 ph inside the window), c9 tid, c10 pid
_P_OP_ARGS = b',"ph":"X","args":{"grad_enabled":'  # c6
_P_TID = b',"tid":'
_P_OP_CAT = b'","cat":"dynamo","pid":'  # c10
# graph lines: c6 op, c7 grad_enabled, c8 hhash (c9 args, c10 ph inside), c11 tid, c12 pid
_P_G_OP = b',"op":'  # c6
_P_G_GRAD = b'","grad_enabled":'  # c7 = c8 + 34 (a 16-hex hash between)
_P_G_ARGS = b',"ph":"X","args":{"hhash":'  # c8
_P_G_CAT = b'","cat":"dynamo.graph","pid":'  # c12

_BLOCK = 1 << 20  # bytes scanned at once: the gathers stay in cache

# one scan at a time in a process: the scan is many short numpy calls, most of which (gathers, nonzero)
# hold the GIL; two files scanned in threads at once hand the GIL back and forth between every call and
# are slower together than one after the other. Other threads meanwhile inflate or run polars (no GIL).
_SCAN_LOCK = threading.Lock()


def _words(buf: bytes) -> np.ndarray:
    """Every unaligned little-endian 64-bit word of buf: words[i] = bytes i..i+7."""
    return np.ndarray((len(buf) - 7,), dtype="<u8", buffer=buf, offset=0, strides=(1,))


def _match_end(w: np.ndarray, ends: np.ndarray, pat: bytes, colon: bool = False) -> np.ndarray:
    """pat occupies the bytes ending at (inclusive) each of `ends`. With `colon`, the byte at each end is
    known to be pat's last byte, a colon (the ends are colon positions): only the bytes before it are compared."""
    if colon:
        assert pat.endswith(b":")
        pat = pat[:-1]
        ends = ends - 1
    n = len(pat)
    if n >= 8:
        start = ends - (n - 1)
        ok = None
        for off in sorted(set(range(0, n - 7, 8)) | {n - 8}):
            m = w[start + off] == np.uint64(int.from_bytes(pat[off : off + 8], "little"))
            if ok is None:
                ok = m
            else:
                ok &= m
        return ok
    mask = np.uint64(((1 << (8 * n)) - 1) << (8 * (8 - n)))
    want = np.uint64(int.from_bytes(b"\0" * (8 - n) + pat, "little"))
    return (w[ends - 7] & mask) == want


_ONES = 0x0101010101010101
_ZEROS = np.uint64(0x30 * _ONES)
_HIGH = np.uint64(0xF0 * _ONES)
_SIX = np.uint64(0x06 * _ONES)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


_LOW = np.array([((1 << (8 * (8 - n))) - 1) if n > 0 else 0xFFFFFFFFFFFFFFFF for n in range(9)], dtype=np.uint64)


def _swar8(word: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Up to 8 decimal digits in the high `length` bytes of each little-endian word (SWAR)."""
    low = _LOW[length]  # the bytes before the number
    v = (word & ~low) | (_ZEROS & low)  # ... read as leading '0's
    ok = ((v & _HIGH) == _ZEROS) & (((v + _SIX) & _HIGH) == _ZEROS)
    v -= _ZEROS
    v = (v * np.uint64(10) + (v >> np.uint64(8))) & np.uint64(0x00FF00FF00FF00FF)
    v = (v * np.uint64(100) + (v >> np.uint64(16))) & np.uint64(0x0000FFFF0000FFFF)
    v = (v * np.uint64(10000) + (v >> np.uint64(32))) & np.uint64(0xFFFFFFFF)
    return v.view(np.int64), ok


def _swar_full(word: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """_swar8 for words of 8 digits."""
    ok = ((word & _HIGH) == _ZEROS) & (((word + _SIX) & _HIGH) == _ZEROS)
    v = word - _ZEROS
    v = (v * np.uint64(10) + (v >> np.uint64(8))) & np.uint64(0x00FF00FF00FF00FF)
    v = (v * np.uint64(100) + (v >> np.uint64(16))) & np.uint64(0x0000FFFF0000FFFF)
    v = (v * np.uint64(10000) + (v >> np.uint64(32))) & np.uint64(0xFFFFFFFF)
    return v.view(np.int64), ok


def _ints(w: np.ndarray, lo: np.ndarray, hi: np.ndarray, wide: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The decimal integers in buf[lo:hi] per row (up to 16 digits; 8 unless `wide`), and whether each
    is a well-formed non-negative number (digits only)."""
    length = hi - lo
    if wide and len(length) and (length == 16).all():  # e.g. every ts (microseconds since the epoch)
        vals, ok = _swar_full(w[hi - 8])
        hv, k2 = _swar_full(w[hi - 16])
        return vals + hv * 100_000_000, ok & k2
    ok = (length >= 1) & (length <= (16 if wide else 8))
    low_len = np.minimum(np.maximum(length, 0), 8)
    vals, k = _swar8(w[hi - 8], low_len)
    ok &= k
    if wide and (length > 8).any():
        high_len = np.minimum(np.maximum(length - 8, 0), 8)
        hv, k2 = _swar8(w[hi - 16], high_len)
        ok &= k2 | (high_len == 0)
        vals = vals + hv * 100_000_000
    return vals, ok


def _ints_signed(a: np.ndarray, w: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    neg = a[lo] == 45  # '-'
    vals, ok = _ints(w, lo + neg, hi)
    return np.where(neg, -vals, vals), ok


def _ints_same(w: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """_ints for a field that is usually the same on every line (pid, tid): compared, parsed once."""
    length = hi - lo
    if len(lo):
        word = w[hi - 8]
        l0 = int(length[0])
        if 1 <= l0 <= 8 and (length == l0).all() and (word == word[0]).all():
            v, ok = _swar8(word[:1], length[:1])
            if ok[0]:
                return np.full(len(lo), v[0], dtype=np.int64), np.ones(len(lo), dtype=bool)
    return _ints(w, lo, hi)


def _scan(buf, lo: int, hi: int):
    """Op lines of buf[lo:hi] (whole lines): (ops, graph candidates, fast, starts, nl) with positions
    global in buf. ops: dict of arrays, or None when too few lines fit (then no line is marked fast);
    graph candidates: (line numbers, colons counted from the line end) of lines whose end has the shape
    of a graph call's."""
    mv = memoryview(buf)[lo:hi]
    a = np.frombuffer(mv, dtype=np.uint8)
    idx = np.flatnonzero((a == 58) | (a == 10))  # colons and newlines, one pass
    q = np.flatnonzero(a[idx] == 10)  # where the newlines are in idx
    nl = idx[q]
    starts = np.empty_like(nl)
    starts[:1] = 0
    starts[1:] = nl[:-1] + 1
    fast = np.zeros(len(nl), dtype=bool)
    none = (None, None, fast, starts + lo, nl + lo)
    if len(nl) < _MIN_LINES:
        return none
    ncol = q.copy()
    ncol[1:] -= q[:-1] + 1  # colons per line
    # every colon of a line is accounted for: 12 in an op line, 14 in a graph call's (names with a colon,
    # or two lines run together by a torn write, go to the general reader)
    cand = np.flatnonzero(((ncol == 12) | (ncol == 14)) & (nl - starts >= 100) & (a[nl - 1] == 125))  # '}'
    if len(cand) < _MIN_SHARE * len(nl):
        return none
    j = q[cand]
    s = starts[cand]
    e = nl[cand]
    w = _words(mv)
    c1, c2, c3, c4, c5, c6 = (idx[j - i] for i in range(1, 7))
    ok = _match_end(w, s + 7, _P_NAME)
    ok &= _match_end(w, c1, _P_DUR, True)
    ok &= _match_end(w, c2, _P_TS, True)
    ok &= _match_end(w, c3, _P_ID, True)
    ok &= _match_end(w, c4, _P_PIDX, True)
    ok &= _match_end(w, c5, _P_LEVEL, True)
    is_op = ok & (ncol[cand] == 12) & _match_end(w, c6, _P_OP_ARGS, True)
    gi = np.flatnonzero(ok & ~is_op & (ncol[cand] == 14))
    graphs = None
    if len(gi):
        gj = j[gi]
        cols = np.stack([e[gi]] + [idx[gj - i] for i in range(1, 13)] + [s[gi]], axis=1) + lo
        graphs = (cand[gi], cols)
    sel = np.flatnonzero(is_op)
    if len(sel) < _MIN_SHARE * len(nl):
        return none
    cand, s, e, j = cand[sel], s[sel], e[sel], j[sel]
    c1, c2, c3, c4, c5, c6 = c1[sel], c2[sel], c3[sel], c4[sel], c5[sel], c6[sel]
    c9, c10 = idx[j - 9], idx[j - 10]
    ok = (c10 - 22 > s + 8) & (c5 - 8 == c6 + 2)  # grad_enabled: one digit
    ok &= _match_end(w, c10, _P_OP_CAT, True)
    ok &= _match_end(w, c9, _P_TID, True)
    g = a[c6 + 1]
    ok &= (g == 48) | (g == 49)
    level_len = c4 - 8 - c5 - 1
    ok &= (level_len >= 1) & (level_len <= 4)
    pid, k1 = _ints_same(w, c10 + 1, c9 - 6)
    tid, k2 = _ints_same(w, c9 + 1, c6 - 32)
    # a negative p_idx (an op at top level, no graph call) fails here: the general reader takes it
    p_idx, k4 = _ints(w, c4 + 1, c3 - 6)
    ident, k5 = _ints(w, c3 + 1, c2 - 5)
    ts, k6 = _ints(w, c2 + 1, c1 - 6)
    dur, k7 = _ints(w, c1 + 1, e - 1)
    good = ok & k1 & k2 & k4 & k5 & k6 & k7 & (ident > p_idx)
    sel = np.flatnonzero(good)
    if len(sel) < _MIN_SHARE * len(nl):
        return none
    ops = {
        "pid": pid[sel], "tid": tid[sel], "p_idx": p_idx[sel], "k": ident[sel] - p_idx[sel] - 1,
        "ts": ts[sel], "dur": dur[sel], "name_lo": s[sel] + (lo + 8), "name_hi": c10[sel] + (lo - 21),
    }  # fmt: skip
    fast[cand[sel]] = True
    return ops, graphs, fast, starts + lo, nl + lo


def _graph_lines(buf: bytes, cols: np.ndarray):
    """Validate and parse graph-call lines from their colons (see _scan): (the rows that fit, columns)."""
    a = np.frombuffer(buf, dtype=np.uint8)
    w = _words(buf)
    e = cols[:, 0]
    c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12 = (cols[:, i] for i in range(1, 13))
    s = cols[:, 13]
    ok = _match_end(w, c6, _P_G_OP, True) & (c12 - 28 > s + 8) & _match_end(w, s + 7, _P_NAME)
    ok &= _match_end(w, c7, _P_G_GRAD, True) & (c7 == c8 + 34) & (c6 - 5 == c7 + 2)
    ok &= _match_end(w, c8, _P_G_ARGS, True) & _match_end(w, c11, _P_TID, True) & _match_end(w, c12, _P_G_CAT, True)
    g = a[c7 + 1]
    ok &= (g == 48) | (g == 49)
    pid, k1 = _ints(w, c12 + 1, c11 - 6)
    tid, k2 = _ints(w, c11 + 1, c8 - 25)
    op, k3 = _ints(w, c6 + 1, c5 - 8)
    level, k4 = _ints(w, c5 + 1, c4 - 8)
    p_idx, k5 = _ints_signed(a, w, c4 + 1, c3 - 6)
    ident, k6 = _ints(w, c3 + 1, c2 - 5)
    ts, k7 = _ints(w, c2 + 1, c1 - 6)
    dur, k8 = _ints(w, c1 + 1, e - 1)
    # the host hash: 16 characters between quotes, the same on every line of a file
    h1, h2 = w[c8 + 2], w[c8 + 10]
    ok &= (a[c8 + 1] == 34) & k1 & k2 & k3 & k4 & k5 & k6 & k7 & k8
    sel = np.flatnonzero(ok)
    if len(sel) and not ((h1[sel] == h1[sel[0]]).all() and (h2[sel] == h2[sel[0]]).all()):
        sel = sel[:0]  # several hosts in one file: leave them to the general reader
    hhash = bytes(buf[int(c8[sel[0]]) + 2 : int(c8[sel[0]]) + 18]).decode("utf-8", "replace") if len(sel) else ""
    out = {
        "pid": pid[sel], "tid": tid[sel], "id": ident[sel], "ts": ts[sel], "dur": dur[sel], "p_idx": p_idx[sel],
        "level": level[sel], "grad_enabled": (g[sel] - 48).astype(np.int64), "op": op[sel],
        "name_lo": s[sel] + 8, "name_hi": c12[sel] - 27, "hhash": hhash,
    }  # fmt: skip
    return sel, out


class _Ops:
    """Op and graph-call lines of one chunk, found and parsed block by block; `rest` is every other line."""

    def __init__(self, chunk: bytes):
        self.n = 0
        self.rest = chunk
        self.chunk = chunk
        self.graphs = None
        if len(chunk) < _MIN_BYTES or chunk.count(b"\n", 0, 1 << 16) * (len(chunk) >> 16 or 1) < _MIN_LINES:
            return
        end = chunk.rfind(b"\n") + 1
        ops_list: list = []
        gcands: list = []
        fasts, starts, nls = [], [], []
        lines = 0
        pos = 0
        while pos < end:
            stop = chunk.find(b"\n", min(pos + _BLOCK, end - 1)) + 1 or end
            ops, g, fast, st, nl = _scan(chunk, pos, stop)
            if ops is not None:
                ops_list.append(ops)
                if g is not None:
                    gcands.append((g[0] + lines, g[1]))
            fasts.append(fast)
            starts.append(st)
            nls.append(nl)
            lines += len(nl)
            pos = stop
        if not ops_list:
            return
        fast = np.concatenate(fasts)
        if gcands:
            rows = np.concatenate([g[0] for g in gcands])
            sel, self.graphs = _graph_lines(chunk, np.concatenate([g[1] for g in gcands]))
            fast[rows[sel]] = True
        parts = [_other_lines(chunk, np.concatenate(starts), np.concatenate(nls), fast)]
        if end < len(chunk):
            parts.append(chunk[end:])
        self.rest = b"".join(parts)
        self.ops = {k: np.concatenate([o[k] for o in ops_list]) for k in ops_list[0]}
        self.n = len(self.ops["pid"])


def _other_lines(chunk: bytes, starts: np.ndarray, nl: np.ndarray, fast: np.ndarray) -> bytes:
    """The lines of chunk not marked fast, joined (starts, nl: each line's start and newline)."""
    slow = ~fast
    # runs of consecutive slow lines: copy each run in one slice
    edges = np.flatnonzero(np.diff(np.concatenate(([False], slow, [False])).astype(np.int8)))
    run_start, run_end = edges[0::2], edges[1::2]
    parts = [chunk[a:b] for a, b in zip(starts[run_start].tolist(), (nl[run_end - 1] + 1).tolist())]
    return b"".join(parts)


class Fallback(Exception):
    """A line the fast path took is not what it seemed: read the file with the general reader."""


def _name(buf: bytes, lo, hi) -> str:
    try:
        name = orjson.loads(buf[int(lo) : int(hi)])
    except orjson.JSONDecodeError:
        raise Fallback from None
    if not isinstance(name, str):
        raise Fallback
    return name


class _FastReducer:
    """Feeds the op reducer of the summaries (`summarize._OpReducer`) with pre-aggregated fast ops, in
    the shape its own per-chunk histograms have: pid, name, cat, dur, __gop, __k, __pend, n."""

    def __init__(self, red, state):
        self.red = red
        self.state = state
        self.gnames: dict[tuple[int, int], str] = {}
        self.graph_count = 0
        self.gpending: list[pl.DataFrame] = []
        self.names: dict[tuple, str] = {}
        self.count = 0
        self.gmap: dict[tuple[int, int], int] = {}  # (pid, graph call id) -> its `op`

    def add(self, ops: _Ops) -> None:
        if ops.graphs is not None:
            self._add_graphs(ops.graphs, ops.chunk)
        if not ops.n:
            return
        o = ops.ops
        n = ops.n
        self.count += n
        pid, p_idx = o["pid"], o["p_idx"]
        # the ops of one graph call are consecutive: look their parent up once per run
        brk = np.flatnonzero((p_idx[1:] != p_idx[:-1]) | (pid[1:] != pid[:-1])) + 1
        run_start = np.concatenate(([0], brk))
        run_len = np.diff(np.append(run_start, n))
        gmap = self.gmap
        rpid = pid[run_start]
        rgop = np.array(
            [gmap.get(key, -1) for key in zip(rpid.tolist(), p_idx[run_start].tolist())], dtype=np.int64
        )
        known = rgop >= 0
        if not known.all():  # graph call not seen (yet): the op reducer resolves these at the end
            rows = np.repeat(~known, run_len)
            self._add_pending({c: v[rows] for c, v in o.items()}, ops.chunk)
            keep = np.repeat(known, run_len)
            o = {c: v[keep] for c, v in o.items()}
            rpid, rgop, run_len = rpid[known], rgop[known], run_len[known]
            if not len(rgop):
                self._add_times(o)
                return
        # a dense code per (pid, graph, k), then a histogram over (code, dur)
        upid, pid_c = np.unique(rpid, return_inverse=True)
        ugop, gop_c = np.unique(rgop, return_inverse=True)
        k = o["k"]
        kn = int(k.max()) + 1
        spec = np.repeat(pid_c * len(ugop) + gop_c, run_len) * kn + k
        n_spec = len(upid) * len(ugop) * kn
        dur = o["dur"]
        # a dense histogram of a few times the ops at most; longer durations are counted by np.unique
        d_small = max(1, min(int(dur.max()) + 1, max(1 << 16, 4 * len(dur)) // max(n_spec, 1)))
        small = dur < d_small
        codes, durs, counts = [], [], []
        if small.all():
            cnt = np.bincount(spec * d_small + dur, minlength=0)
        else:
            cnt = np.bincount(spec[small] * d_small + dur[small], minlength=0)
            big = ~small
            ukey, ucnt = np.unique(np.stack([spec[big], dur[big]], axis=1), axis=0, return_counts=True)
            codes.append(ukey[:, 0])
            durs.append(ukey[:, 1])
            counts.append(ucnt)
        nz = np.flatnonzero(cnt)
        codes.insert(0, nz // d_small)
        durs.insert(0, nz % d_small)
        counts.insert(0, cnt[nz])
        code = np.concatenate(codes)
        # names: one per spec, read from its first line the first time it is seen
        uspec = np.unique(code)
        kk = uspec % kn
        gg = (uspec // kn) % len(ugop)
        pp = (uspec // kn) // len(ugop)
        names = {}
        lo, hi, chunk = o["name_lo"], o["name_hi"], ops.chunk
        for sc, pv, gv, kv in zip(uspec.tolist(), upid[pp].tolist(), ugop[gg].tolist(), kk.tolist()):
            key = (pv, gv, kv)
            name = self.names.get(key)
            if name is None:
                row = int(np.argmax(spec == sc))
                name = self.names[key] = _name(chunk, lo[row], hi[row])
            names[sc] = name
        ci = np.searchsorted(uspec, code)
        hist = pl.DataFrame(
            {
                "pid": upid[pp][ci],
                "name": pl.Series([names[sc] for sc in uspec.tolist()], dtype=pl.String).gather(ci),
                "cat": pl.Series(["dynamo"], dtype=pl.String).gather(np.zeros(len(code), dtype=np.int64)),
                "dur": np.concatenate(durs).astype(np.int64),
                "__gop": ugop[gg][ci],
                "__k": kk[ci].astype(np.int64),
                "__pend": pl.Series([None] * len(code), dtype=pl.Int64),
                "n": np.concatenate(counts).astype(np.int64),
            }
        ).with_columns(pl.col("__gop").cast(pl.String))
        self.red.hists.append(hist)
        self._add_times(o)

    def _add_graphs(self, g: dict, chunk: bytes) -> None:
        """Graph-call lines: their id -> op for their ops, and their rows for the summaries."""
        n = len(g["pid"])
        if not n:
            return
        pid, gid, op = g["pid"].tolist(), g["id"].tolist(), g["op"].tolist()
        for key, value in zip(zip(pid, gid), op):
            self.gmap.setdefault(key, value)
        names = []
        lo, hi = g["name_lo"], g["name_hi"]
        for i, key in enumerate(zip(pid, op)):
            name = self.gnames.get(key)
            if name is None:
                name = self.gnames[key] = _name(chunk, lo[i], hi[i])
            names.append(name)
        frame = pl.DataFrame(
            {
                "name": pl.Series(names, dtype=pl.String),
                "cat": pl.Series(["dynamo.graph"], dtype=pl.String).gather(np.zeros(n, dtype=np.int64)),
                "pid": g["pid"], "tid": g["tid"], "id": g["id"], "ts": g["ts"], "dur": g["dur"], "p_idx": g["p_idx"],
                "level": g["level"], "grad_enabled": g["grad_enabled"], "op": g["op"],
                "hhash": pl.Series([g["hhash"]], dtype=pl.String).gather(np.zeros(n, dtype=np.int64)),
            }  # fmt: skip
        )
        self.graph_count += n
        self.gpending.append(frame)
        if sum(f.height for f in self.gpending) >= 200_000:
            self.flush_graphs()

    def flush_graphs(self) -> None:
        """Graph-call rows go to the reader's frames in batches (each costs a few polars passes)."""
        if self.gpending:
            frame = pl.concat(self.gpending) if len(self.gpending) > 1 else self.gpending[0]
            self.gpending = []
            self.state._add_frame(frame)

    def _add_times(self, o: dict) -> None:
        if len(o["pid"]):
            self.red.times.append(pl.DataFrame({"pid": o["pid"], "tid": o["tid"], "ts": o["ts"], "dur": o["dur"]}))

    def _add_pending(self, o: dict, chunk: bytes) -> None:
        """Ops whose graph call is unknown: keyed by their parent (__pend) and k."""
        frame = pl.DataFrame({"pid": o["pid"], "__pend": o["p_idx"], "__k": o["k"], "dur": o["dur"], "__row": np.arange(len(o["pid"]))})
        keys = ["pid", "__pend", "__k"]
        hist = frame.group_by([*keys, "dur"]).agg(pl.len().cast(pl.Int64).alias("n"), pl.col("__row").first())
        specs = hist.group_by(keys).agg(pl.col("__row").first())
        lo, hi = o["name_lo"], o["name_hi"]
        names = [_name(chunk, lo[r], hi[r]) for r in specs.get_column("__row").to_list()]
        specs = specs.drop("__row").with_columns(pl.Series("name", names, dtype=pl.String))
        hist = hist.drop("__row").join(specs, on=keys, how="left")
        self.red.hists.append(
            hist.select(
                "pid", "name", pl.lit("dynamo", dtype=pl.String).alias("cat"), "dur",
                pl.lit(None, dtype=pl.String).alias("__gop"), "__k", pl.col("__pend").cast(pl.Int64), "n",
            )  # fmt: skip
        )
        self._add_times(o)


# other lines are handed to the general reader in batches of about this many bytes
_REST_BATCH = 8 << 20


def _text_chunks(data: bytes, state) -> Iterator[bytes]:
    """reader._text_chunks with one copy of the text instead of two: a gzip file's inflated pieces are
    gathered up to a chunk and cut at the last newline of the last piece, the rest carried over. Same
    lines, same warnings."""
    if not data.startswith(_inflate.GZIP_MAGIC):
        yield from _reader._text_chunks(data, state)
        return
    carry = b""
    pending: list = []  # inflated pieces (small gzip members are gathered up to _reader._CHUNK)
    size = 0
    for piece in _reader._inflate_checked(data, state):
        pending.append(piece)
        size += len(piece)
        if size < _reader._CHUNK:
            continue
        cut = piece.rfind(b"\n")
        if cut < 0:
            continue
        parts = [carry, *pending[:-1], memoryview(piece)[: cut + 1]]
        yield b"".join(parts) if len(parts) > 2 or carry else (piece if cut + 1 == len(piece) else piece[: cut + 1])
        carry = piece[cut + 1 :]
        pending, size = [], len(carry)
    cut = -1  # as in reader._text_chunks: whether the text after the last chunk holds a newline
    if pending:
        buf = b"".join([carry, *pending])
        cut = buf.rfind(b"\n")
        if cut >= 0:
            yield buf[: cut + 1]
        carry = buf[cut + 1 :]
    yield from _reader.last_piece(carry, cut, state)


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
    chunks = _text_chunks(data, state)
    first = next(chunks, None)
    if first is None:
        return None
    mode = state.mode = _reader._sniff(first, name)
    if mode == "document":
        return None
    del data
    fast = _FastReducer(reducer, state)
    template = None
    attempts = 0
    rest: list[bytes] = []
    rest_size = 0

    def flush():
        nonlocal template, attempts, rest, rest_size
        text = b"".join(rest)
        rest, rest_size = [], 0
        if not text.strip():
            return
        if (template is None or state.misfit > 0.25) and attempts < 8:
            attempts += 1
            template = _reader._Template.learn(text) or template
        state.parse_chunk(text, template)

    for chunk in _reader._chain([first], chunks):
        with _SCAN_LOCK:
            ops = _Ops(chunk)
        if ops.rest:
            if not ops.rest.endswith(b"\n"):  # a last line without newline: keep the general reader's view
                flush()
                rest.append(ops.rest)
                flush()
            else:
                rest.append(ops.rest)
                rest_size += len(ops.rest)
        fast.add(ops)
        del ops
        if rest_size >= _REST_BATCH:
            flush()
    flush()
    fast.flush_graphs()
    state.seen_objects += fast.count + fast.graph_count
    state.fast_ops, state.fast_graphs = fast.count, fast.graph_count
    state.reduced += fast.count
    state.check_is_trace()
    frame = state.finish(columns)
    return frame, state.info(), state


def file_partial_fast(path: str | os.PathLike):
    """summarize.file_partial through the fast path (same Partial)."""
    from .summarize import SUMMARY_COLUMNS, _OpReducer, _core, _ensure, _file_partial_general

    red = _OpReducer()
    try:
        res = read_fast(path, SUMMARY_COLUMNS, red)
    except Fallback:
        res = None
    if res is None:
        return _file_partial_general(path)
    others, info, state = res
    hist, times = red.result(state)
    return _core(hist, times, _ensure(others), info)
