"""Compiled byte scanner for the op and graph-call lines of dynascope's own traces.

It recognises exactly the two line layouts that trace/format.py defines (op events and graph calls),
byte for byte, followed by a newline. Integers are JSON integers of 1 to 18 digits (no leading zero);
only a graph call's PARENT may be negative; HASH is 16 hex digits; NAME is whatever lies between
`{"name":` and the fixed text after it (a line is matched from its end, so a name may hold anything; it
is decoded by the caller, once per key, and every later line of that key must repeat its bytes).

An op line with PARENT >= 0 < ID is op k = ID - PARENT - 1 of the graph call whose id is PARENT. Its
graph call's OP (looked up in the graph calls taken so far) and k key the op's name and its duration
histogram; while the graph call is unknown, its key holds the parent instead, as -2 - PARENT. Op lines at
top level (PARENT < 0), graph calls of a second host, lines whose name differs from the one first taken
for their key, and lines of any other layout are not taken: they are returned as byte ranges, in order,
for the general reader.

State lives in numpy arrays owned by `Scanner` (one per file); the kernels run without the GIL.
`count_in_segments` is the step attribution's pass over the op times (steps.ops_per_region).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, overload

import numba
import numba.core.cpu
import numpy as np

from dynascope.trace import format as layout

# numba's `_nrt=False` (no reference counting of the arrays the kernels pass each other) makes the scan
# about 3x faster. It is an underscore option, so without it a numba release still compiles the scanner.
_NO_REFCOUNTS = {"_nrt": False} if hasattr(numba.core.cpu.CPUTargetOptions, "_nrt") else {}
_Kernel = TypeVar("_Kernel", bound=Callable[..., Any])


@overload
def _kernel(fn: _Kernel, /) -> _Kernel: ...
@overload
def _kernel(*, nogil: bool) -> Callable[[_Kernel], _Kernel]: ...
def _kernel(fn: Any = None, /, **options: Any) -> Any:
    """`numba.njit` with the scanner's options. Typed as returning the function itself: a dispatcher is
    called like the Python function it compiles (numba's own stubs type it as Dispatcher, whose call
    they leave untyped)."""
    settings: dict[str, Any] = {"cache": True, **_NO_REFCOUNTS, **options}  # _nrt is not in numba's stubs
    compile_ = numba.njit(**settings)
    return compile_ if fn is None else compile_(fn)


OTHER, OP, GRAPH = 0, 1, 2

# counters and caches in the state array `st`
_GRAPHS, _SPECS, _HIST, _GNAMES, _NAME_BYTES, _NAMES, _HASH_SET, _LAST_PID, _LAST_PARENT, _LAST_GOP = range(10)
_STATE_SIZE = 10

# fields parsed from a line into the scratch array `f`
F_PID, F_TID, F_ID, F_TS, F_DUR, F_PARENT, F_LEVEL, F_GRAD, F_GOP, F_NAME_LO, F_NAME_HI, F_HASH_AT = range(12)

_END_STATUS, _GROW_STATUS = 0, 1


def _pattern(text: str) -> np.ndarray:
    """[length, words...]: the text as the little-endian 64-bit words `_ends_with` compares (from offset
    0 in steps of 8, the last one ending with the text), or, shorter than 8 bytes, one word's top bytes."""
    raw = text.encode()
    n = len(raw)
    if n < 8:
        return np.array([n, int.from_bytes(raw, "little")], dtype=np.uint64)
    offsets = sorted(set(range(0, n - 7, 8)) | {n - 8})
    return np.array([n] + [int.from_bytes(raw[o : o + 8], "little") for o in offsets], dtype=np.uint64)


# the layout's literal pieces, as matched from a line's end backwards
_NAME_KEY = _pattern(layout.NAME)
_DUR = _pattern(layout.DUR)
_TS = _pattern(layout.TS)
_ID = _pattern(layout.ID)
_P_IDX = _pattern(layout.P_IDX)
_LEVEL = _pattern(layout.LEVEL)
_OP_ARGS = _pattern(layout.ARGS + layout.GRAD)
_TID = _pattern(layout.TID)
_OP_CAT = _pattern('"' + layout.CAT + layout.OP_CAT + layout.PID)  # from the name's closing quote
_G_OP = _pattern(layout.OP)
_G_GRAD = _pattern(layout.HHASH_END + layout.GRAD)
_G_ARGS = _pattern(layout.ARGS + layout.HHASH)
_G_CAT = _pattern('"' + layout.CAT + layout.GRAPH_CAT + layout.PID)

# the shortest line either layout can have: no recognised line is shorter (output arrays are sized by it)
MIN_LINE = len(layout.head('""', layout.OP_CAT, 0, 0, 0, 0) + layout.tail(0, 1, 0, 0)) - 1  # without the newline

_EMPTY = -1  # a free slot in a hash table's values

_NEWLINES = np.uint64(0x0A0A0A0A0A0A0A0A)
_LOW_BITS = np.uint64(0x0101010101010101)
_HIGH_BITS = np.uint64(0x8080808080808080)


def words(buf: bytes) -> np.ndarray:
    """Every unaligned little-endian 64-bit word of buf: words[i] = bytes i..i+7 (a view, no copy)."""
    return np.ndarray((max(len(buf) - 7, 0),), dtype="<u8", buffer=buf, offset=0, strides=(1,))


# ----------------------------------------------------------------------------------------------
# matching from the end of a line (buf: the bytes, w: their words)


@_kernel
def _newline_at_or_after(buf, w, i, hi):
    """The first newline in buf[i:hi], or hi. Eight bytes at a time (a zero byte of word ^ newlines)."""
    while i + 8 <= hi:
        x = w[i] ^ _NEWLINES
        if (x - _LOW_BITS) & ~x & _HIGH_BITS:
            break
        i += 8
    while i < hi and buf[i] != 10:
        i += 1
    return i


@_kernel
def _length(pat):
    return np.int64(pat[0])


@_kernel
def _ends_with(w, p, lo, pat):
    """The pattern (see `_pattern`) occupies the bytes ending at p (inclusive), none before lo."""
    n = np.int64(pat[0])
    base = p - n + 1
    if base < lo:
        return False
    if n < 8:
        return p >= 7 and (w[p - 7] >> np.uint64(8 * (8 - n))) == pat[1]
    for k in range(1, len(pat)):
        if w[base + min(8 * (k - 1), n - 8)] != pat[k]:
            return False
    return True


@_kernel
def _is_digit(c):
    return c >= 48 and c <= 57


@_kernel
def _uint_back(buf, p, lo):
    """The JSON integer >= 0 whose last digit is at p: (value, position before its first digit), or
    (-1, p) when there is none, it has a leading zero or more than 18 digits."""
    v = np.int64(0)
    mul = np.int64(1)
    q = p
    while q >= lo and _is_digit(buf[q]):
        if p - q == 18:
            return np.int64(-1), p
        v += (np.int64(buf[q]) - 48) * mul
        mul *= 10
        q -= 1
    if q == p or (p - q > 1 and buf[q + 1] == 48):
        return np.int64(-1), p
    return v, q


@_kernel
def _hex16_back(buf, p, lo):
    if p - 15 < lo:
        return False
    for i in range(p - 15, p + 1):
        c = buf[i]
        if not (_is_digit(c) or (c >= 97 and c <= 102) or (c >= 65 and c <= 70)):
            return False
    return True


@_kernel
def _common_tail(buf, w, s, e, f):
    """`,"level":L,"p_idx":PARENT},"id":ID,"ts":TS,"dur":DUR}` ending before the newline at e: fills f
    and returns the position before L's `,"level":`, or -1. PARENT may be negative here."""
    p = e - 1
    if p < s or buf[p] != 125:  # '}'
        return -1
    f[F_DUR], p = _uint_back(buf, p - 1, s)
    if f[F_DUR] < 0 or not _ends_with(w, p, s, _DUR):
        return -1
    f[F_TS], p = _uint_back(buf, p - _length(_DUR), s)
    if f[F_TS] < 0 or not _ends_with(w, p, s, _TS):
        return -1
    f[F_ID], p = _uint_back(buf, p - _length(_TS), s)
    if f[F_ID] < 0 or not _ends_with(w, p, s, _ID):
        return -1
    parent, p = _uint_back(buf, p - _length(_ID), s)
    if parent < 0:
        return -1
    if p >= s and buf[p] == 45:  # '-'
        parent = -parent
        p -= 1
    f[F_PARENT] = parent
    if not _ends_with(w, p, s, _P_IDX):
        return -1
    f[F_LEVEL], p = _uint_back(buf, p - _length(_P_IDX), s)
    if f[F_LEVEL] < 0 or not _ends_with(w, p, s, _LEVEL):
        return -1
    return p - _length(_LEVEL)


@_kernel
def _pid_tid_name(buf, w, s, p, cat, f):
    """`"tid":T` ending at p, then `"pid":P` after `cat`, then the name after `{"name":` at s."""
    f[F_TID], p = _uint_back(buf, p, s)
    if f[F_TID] < 0 or not _ends_with(w, p, s, _TID):
        return False
    f[F_PID], p = _uint_back(buf, p - _length(_TID), s)
    if f[F_PID] < 0 or not _ends_with(w, p, s, cat):
        return False
    f[F_NAME_LO] = s + _length(_NAME_KEY)
    f[F_NAME_HI] = p - _length(cat) + 2  # after the name's closing quote, the first byte of `cat`
    opening = s + _length(_NAME_KEY)
    return f[F_NAME_HI] - opening >= 2 and _ends_with(w, opening - 1, s, _NAME_KEY) and buf[opening] == 34


@_kernel
def _parse_line(buf, w, s, e, f):
    """OP, GRAPH or OTHER for the line buf[s:e] (e at its newline); fills f for OP and GRAPH."""
    if e - s < MIN_LINE:
        return OTHER
    p = _common_tail(buf, w, s, e, f)
    if p < 0:
        return OTHER
    v, p = _uint_back(buf, p, s)  # grad_enabled of an op line, op of a graph call's
    if v < 0:
        return OTHER
    if _ends_with(w, p, s, _OP_ARGS):
        f[F_GRAD] = v
        ok = f[F_PARENT] >= 0 and f[F_ID] > f[F_PARENT] and _pid_tid_name(buf, w, s, p - _length(_OP_ARGS), _OP_CAT, f)
        return OP if ok else OTHER
    if not _ends_with(w, p, s, _G_OP):
        return OTHER
    f[F_GOP] = v
    f[F_GRAD], p = _uint_back(buf, p - _length(_G_OP), s)
    if f[F_GRAD] < 0 or not _ends_with(w, p, s, _G_GRAD):
        return OTHER
    p -= _length(_G_GRAD)
    f[F_HASH_AT] = p - 15
    if not _hex16_back(buf, p, s) or not _ends_with(w, p - 16, s, _G_ARGS):
        return OTHER
    return GRAPH if _pid_tid_name(buf, w, s, p - 16 - _length(_G_ARGS), _G_CAT, f) else OTHER


# ----------------------------------------------------------------------------------------------
# open-addressing hash tables: keys (cap, 3) int64, values (cap,) int64 (_EMPTY where free)


@_kernel
def _slot(keys, vals, a, b, c):
    """Where (a, b, c) is, or the free slot where it would go."""
    h = (np.uint64(a) * np.uint64(0x9E3779B97F4A7C15)) ^ (np.uint64(b) * np.uint64(0xC2B2AE3D27D4EB4F))
    h ^= np.uint64(c) * np.uint64(0x165667B19E3779F9)
    h ^= h >> np.uint64(33)  # murmur3's finaliser: every key bit reaches the low (index) bits
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    mask = len(vals) - 1
    i = np.int64(h & np.uint64(mask))
    while vals[i] != _EMPTY and not (keys[i, 0] == a and keys[i, 1] == b and keys[i, 2] == c):
        i = (i + 1) & mask
    return i


@_kernel
def _put(keys, vals, i, a, b, c, v):
    keys[i, 0] = a
    keys[i, 1] = b
    keys[i, 2] = c
    vals[i] = v


@_kernel(nogil=True)
def rehash(keys, vals, new_keys, new_vals):
    """Move every entry of a table into a larger, empty one."""
    for i in range(len(vals)):
        if vals[i] != _EMPTY:
            j = _slot(new_keys, new_vals, keys[i, 0], keys[i, 1], keys[i, 2])
            _put(new_keys, new_vals, j, keys[i, 0], keys[i, 1], keys[i, 2], vals[i])


# ----------------------------------------------------------------------------------------------
# names: the bytes of each key's name, kept to compare later lines of the key with


@_kernel
def _same_name(buf, lo, hi, names, name_at, k):
    off, n = name_at[k, 0], name_at[k, 1]
    if hi - lo != n:
        return False
    for i in range(n):
        if buf[lo + i] != names[off + i]:
            return False
    return True


@_kernel
def _add_name(buf, lo, hi, names, name_at, st):
    k = st[_NAMES]
    off = st[_NAME_BYTES]
    for i in range(hi - lo):
        names[off + i] = buf[lo + i]
    name_at[k, 0] = off
    name_at[k, 1] = hi - lo
    st[_NAMES] = k + 1
    st[_NAME_BYTES] = off + hi - lo
    return k


# ----------------------------------------------------------------------------------------------
# taking a parsed line into the state


@_kernel
def _graph_op_of(pid, parent, st, gk, gv):
    """The OP of the graph call (pid, id = parent), or -2 - parent while it is unknown."""
    if pid == st[_LAST_PID] and parent == st[_LAST_PARENT]:
        return st[_LAST_GOP]
    v = gv[_slot(gk, gv, pid, parent, 0)]
    if v == _EMPTY:
        return -2 - parent
    st[_LAST_PID], st[_LAST_PARENT], st[_LAST_GOP] = pid, parent, v
    return v


@_kernel
def _take_op(buf, f, st, gk, gv, sk, sv, hk, hv, names, name_at, times, n):
    pid, dur = f[F_PID], f[F_DUR]
    gop = _graph_op_of(pid, f[F_PARENT], st, gk, gv)
    k = f[F_ID] - f[F_PARENT] - 1
    i = _slot(sk, sv, pid, gop, k)
    if sv[i] == _EMPTY:
        _put(sk, sv, i, pid, gop, k, _add_name(buf, f[F_NAME_LO], f[F_NAME_HI], names, name_at, st))
        st[_SPECS] += 1
    elif not _same_name(buf, f[F_NAME_LO], f[F_NAME_HI], names, name_at, sv[i]):
        return False
    j = _slot(hk, hv, sv[i], dur, 0)
    if hv[j] == _EMPTY:
        _put(hk, hv, j, sv[i], dur, 0, 1)
        st[_HIST] += 1
    else:
        hv[j] += 1
    times[0, n] = pid
    times[1, n] = f[F_TID]
    times[2, n] = f[F_TS]
    times[3, n] = dur
    return True


@_kernel
def _take_graph(buf, f, st, gk, gv, nk, nv, names, name_at, hhash, rows, n):
    pid, gop = f[F_PID], f[F_GOP]
    i = _slot(nk, nv, pid, gop, 0)
    if nv[i] != _EMPTY and not _same_name(buf, f[F_NAME_LO], f[F_NAME_HI], names, name_at, nv[i]):
        return False
    h = f[F_HASH_AT]
    if st[_HASH_SET]:
        for b in range(16):
            if buf[h + b] != hhash[b]:
                return False  # a second host in the file: the general reader takes it
    else:
        for b in range(16):
            hhash[b] = buf[h + b]
        st[_HASH_SET] = 1
    if nv[i] == _EMPTY:
        _put(nk, nv, i, pid, gop, 0, _add_name(buf, f[F_NAME_LO], f[F_NAME_HI], names, name_at, st))
        st[_GNAMES] += 1
    j = _slot(gk, gv, pid, f[F_ID], 0)
    if gv[j] == _EMPTY:  # a repeated id keeps its first graph call (ids are unique in a file)
        _put(gk, gv, j, pid, f[F_ID], 0, gop)
        st[_GRAPHS] += 1
    rows[0, n] = pid
    rows[1, n] = f[F_TID]
    rows[2, n] = f[F_ID]
    rows[3, n] = f[F_TS]
    rows[4, n] = f[F_DUR]
    rows[5, n] = f[F_PARENT]
    rows[6, n] = f[F_LEVEL]
    rows[7, n] = f[F_GRAD]
    rows[8, n] = gop
    rows[9, n] = nv[i]
    return True


@_kernel
def _full(st, gv, sv, hv, nv, names, name_at, line_len):
    """Whether a table is half full (or the name store cannot take this line's name): grow first."""
    return (
        2 * (st[_GRAPHS] + 1) > len(gv)
        or 2 * (st[_SPECS] + 1) > len(sv)
        or 2 * (st[_HIST] + 1) > len(hv)
        or 2 * (st[_GNAMES] + 1) > len(nv)
        or st[_NAMES] + 1 > len(name_at)
        or st[_NAME_BYTES] + line_len > len(names)
    )


@_kernel(nogil=True)
def scan(buf, w, lo, hi, st, gk, gv, sk, sv, hk, hv, nk, nv, names, name_at, hhash, times, rows, rest, f):
    """Take the op and graph-call lines of buf[lo:hi]; the other lines' byte ranges go to `rest` (runs of
    consecutive lines merged). Stops early, at a line start, when a table must grow.

    Returns (where it stopped, status, op lines taken, graph calls taken, rest ranges)."""
    n_ops = n_graphs = n_rest = 0
    run = -1  # start of the current run of other lines
    status = _END_STATUS
    i = lo
    while i < hi:
        j = _newline_at_or_after(buf, w, i, hi)
        if _full(st, gv, sv, hv, nv, names, name_at, j - i):
            status = _GROW_STATUS
            break
        kind = _parse_line(buf, w, i, j, f) if j < hi else OTHER
        taken = False
        if kind == OP:
            taken = _take_op(buf, f, st, gk, gv, sk, sv, hk, hv, names, name_at, times, n_ops)
            n_ops += taken
        elif kind == GRAPH:
            taken = _take_graph(buf, f, st, gk, gv, nk, nv, names, name_at, hhash, rows, n_graphs)
            n_graphs += taken
        if taken and run >= 0:
            rest[0, n_rest] = run
            rest[1, n_rest] = i
            n_rest += 1
            run = -1
        elif not taken and run < 0:
            run = i
        i = min(j + 1, hi)
    if run >= 0:
        rest[0, n_rest] = run
        rest[1, n_rest] = i
        n_rest += 1
    return i, status, n_ops, n_graphs, n_rest


# ----------------------------------------------------------------------------------------------
# step attribution (summarize._ops_per_region)


@_kernel(nogil=True)
def count_in_segments(bounds, owners, ts, dur, op_count, op_us):
    """Count each op (start ts, duration dur) in the owner of the last segment that starts at or before
    it (bounds sorted; an owner < 0 is no region): op_count[owner] += 1, op_us[owner] += dur. Ops come
    nearly in time order, so the search starts at the previous op's segment; a jump back or far ahead
    is a binary search."""
    n = len(bounds)
    k = 0
    for i in range(len(ts)):
        t = ts[i]
        if t < bounds[0]:
            continue
        if t < bounds[k] or (k + 8 < n and bounds[k + 8] <= t):
            k = np.searchsorted(bounds, t, side="right") - 1
        while k + 1 < n and bounds[k + 1] <= t:
            k += 1
        r = owners[k]
        if r >= 0:
            op_count[r] += 1
            op_us[r] += dur[i]


# ----------------------------------------------------------------------------------------------


def _table(cap: int) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((cap, 3), dtype=np.int64), np.full(cap, _EMPTY, dtype=np.int64)


def _grown(keys: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    new_keys, new_vals = _table(2 * len(vals))
    rehash(keys, vals, new_keys, new_vals)
    return new_keys, new_vals


class Scanner:
    """One file's scan state: graph calls (pid, id) -> OP, op keys (pid, OP, k) -> name, their duration
    histogram (name index, dur) -> count, graph-call names (pid, OP) -> name, the file's host hash."""

    def __init__(self, cap: int = 1 << 12):
        self.st = np.zeros(_STATE_SIZE, dtype=np.int64)
        self.st[_LAST_PID] = self.st[_LAST_PARENT] = -1
        self.graphs = _table(cap)
        self.specs = _table(cap)
        self.hist = _table(cap)
        self.gnames = _table(cap)
        self.names = np.zeros(1 << 16, dtype=np.uint8)
        self.name_at = np.zeros((cap, 2), dtype=np.int64)
        self.hhash = np.zeros(16, dtype=np.uint8)

    def scan(self, buf, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Scan the whole lines of buf[lo:hi] (bytes or a buffer): (op times (4, n): pid, tid, ts, dur;
        graph-call rows (10, n): pid, tid, id, ts, dur, p_idx, level, grad_enabled, op, name index;
        other lines' byte ranges (2, n): start, end)."""
        a = np.frombuffer(buf, dtype=np.uint8)
        parts = []
        while True:
            cap = (hi - lo) // MIN_LINE + 2
            times = np.empty((4, cap), dtype=np.int64)
            rows = np.empty((10, cap), dtype=np.int64)
            rest = np.empty((2, cap), dtype=np.int64)
            stop, status, n_ops, n_graphs, n_rest = scan(
                a, words(buf), lo, hi, self.st, *self.graphs, *self.specs, *self.hist, *self.gnames,
                self.names, self.name_at, self.hhash, times, rows, rest, np.zeros(12, dtype=np.int64),
            )  # fmt: skip
            parts.append((times[:, :n_ops], rows[:, :n_graphs], rest[:, :n_rest]))
            if status == _END_STATUS:
                break
            self._grow(line_len=(buf.find(b"\n", stop, hi) + 1 or hi) - stop)
            lo = stop
        if len(parts) == 1:
            return parts[0]
        times_all, rows_all, rest_all = (np.concatenate([p[i] for p in parts], axis=1) for i in range(3))
        return times_all, rows_all, rest_all

    def _grow(self, line_len: int) -> None:
        st = self.st
        for attr, used in (("graphs", _GRAPHS), ("specs", _SPECS), ("hist", _HIST), ("gnames", _GNAMES)):
            table = getattr(self, attr)
            if 2 * (st[used] + 1) > len(table[1]):
                setattr(self, attr, _grown(*table))
        if st[_NAMES] + 1 > len(self.name_at):
            self.name_at = np.concatenate([self.name_at, np.zeros_like(self.name_at)])
        need = int(st[_NAME_BYTES]) + line_len
        if need > len(self.names):
            self.names = np.concatenate(
                [self.names, np.zeros(max(need, 2 * len(self.names)) - len(self.names), dtype=np.uint8)]
            )

    def name_bytes(self, k: int) -> bytes:
        off, n = self.name_at[k]
        return self.names[off : off + n].tobytes()

    def op_keys(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per op key: pid, OP (-2 - parent while the graph call is unknown), k, name index."""
        keys, vals = self.specs
        used = vals != _EMPTY
        return keys[used, 0], keys[used, 1], keys[used, 2], vals[used]

    def op_bins(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per histogram bin: the op key's name index, dur, count."""
        keys, vals = self.hist
        used = vals != _EMPTY
        return keys[used, 0], keys[used, 1], vals[used]

    def host_hash(self) -> str:
        return self.hhash.tobytes().decode("ascii") if self.st[_HASH_SET] else ""


def warm_up() -> None:
    """Compile the kernels (or load them from numba's on-disk cache), table growth included."""
    line = (layout.head('"f"', layout.OP_CAT, 1, 1, 1, 3) + layout.tail(1, 2, 5, 1)).encode()
    text = line * 4
    Scanner(cap=2).scan(text, 0, len(text))
    times = np.arange(4, dtype=np.int64)
    counts = np.zeros(1, dtype=np.int64)
    for writable in (True, False):  # polars hands op times over read-only, or as a copy
        times.setflags(write=writable)
        count_in_segments(times[:2], np.array([0, -1]), times, times, counts, counts.copy())
