"""Fast path for dynascope's own traces (docs/trace-format.md): op and graph-call lines are taken by a
compiled byte scanner (`_scan`), every other line goes through the general reader unchanged.

Op events are the bulk of a trace and all have the one line layout of trace/format.py.
Their identity needs no JSON parsing: op k of a graph call has id = p_idx + 1 + k, and its attribution
is the OH record with graph_op = the parent graph event's `op` and index = k. The scanner keys each op
by (pid, graph op, k) and counts it in a per-file duration histogram, in exactly the shape the
summaries' op reducer (`partial_build.OpReducer`) builds from the general reader's rows; it keeps each op's
(pid, tid, ts, dur) for the step attribution and hands graph calls over as rows. Metadata, regions,
compile events, ops at top level and lines of any other layout go to the general reader, so the Partial
is identical to `partial_build.general_file_partial` (tests/analyze/test_fastpath.py).

The inflated text is scanned piece by piece where it lies (no copy), only a line cut by a piece boundary
is copied. The scanner releases the GIL, as do inflating and polars: files read in threads use the cores.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import orjson
import polars as pl

from dynascope.analyze.partial import SUMMARY_COLUMNS, Partial
from dynascope.analyze.partial_build import OpReducer, general_file_partial, partial_of_file
from dynascope.analyze.read import _inflate, _scan
from dynascope.analyze.read import lines as _lines
from dynascope.analyze.read.reader import FileReader
from dynascope.analyze.read.readinfo import FileLog, ReadInfo
from dynascope.trace.format import GRAPH_CAT

__all__ = ["FastRead", "file_partial", "read_fast"]

# graph-call rows go to the reader's frames in batches of about this many (each costs a few polars passes)
_GRAPH_BATCH = 200_000
# other lines are handed to the general reader in batches of about this many bytes
_REST_BATCH = 8 << 20


class Fallback(Exception):
    """A name the fast path took is not a JSON string: read the file with the general reader."""


def _decode_name(raw: bytes) -> str:
    try:
        name = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise Fallback from None
    if not isinstance(name, str):
        raise Fallback
    return name


def _pieces(data: bytes, log: FileLog) -> Iterator[tuple[bytes, int, int]]:
    """The file's text as (buffer, start, end) ranges of whole lines, in order, without copying it: the
    pieces of a gzip file as inflated (a line cut between two pieces is copied on its own), a plain file
    in lines.CHUNK_BYTES ranges. Then what follows the last newline, as lines.text_chunks yields it (same
    warnings for a truncated gzip member or a torn last line)."""
    cut = -1
    if data.startswith(_inflate.GZIP_MAGIC):
        carry: list[bytes] = []  # the start of a line cut by a piece boundary
        for piece in _lines.inflated(data, log):
            first = piece.find(b"\n")
            if first < 0:
                carry.append(piece)
                continue
            cut = 0
            start = 0
            if carry:
                head = b"".join([*carry, piece[: first + 1]])
                yield head, 0, len(head)
                start = first + 1
            last = piece.rfind(b"\n") + 1
            if last > start:
                yield piece, start, last
            carry = [piece[last:]] if last < len(piece) else []
        tail = b"".join(carry)
    else:
        cut = data.rfind(b"\n")
        pos, size = 0, _lines.CHUNK_BYTES
        while pos <= cut:
            # cut where lines.text_chunks cuts: at the last newline before a multiple of _CHUNK
            limit = (pos // size + 1) * size
            while (end := data.rfind(b"\n", pos, limit) + 1) == 0:
                limit += size
            yield data, pos, end
            pos = end
        tail = data[cut + 1 :]
    for text in _lines.last_piece(tail, cut, log):
        yield text, 0, len(text)


def _sniff_text(pieces: Iterator) -> tuple[list, bytes]:
    """The first pieces and their text, enough of it (7 lines after any leading blank) for
    lines.sniff to judge the file as it judges the general reader's first chunk."""
    taken, text = [], b""
    for piece in pieces:
        buf, lo, hi = piece
        taken.append(piece)
        text += buf[lo : min(hi, lo + (1 << 20))]
        if text.lstrip().count(b"\n") >= 7:
            break
    return taken, text


class _FileScan:
    """Feeds one file's pieces to the scanner; collects the op times, the graph-call rows (handed to the
    reader in batches) and the other lines (handed to the general reader in batches)."""

    def __init__(self, reader: FileReader):
        self.reader = reader
        self.scanner = _scan.Scanner()
        self.times: list[np.ndarray] = []
        self.graph_rows: list[np.ndarray] = []
        self.graph_count = 0
        self.op_count = 0
        self.names: dict[int, str] = {}
        self.rest: list[bytes] = []
        self.rest_size = 0

    def add(self, buf: bytes, lo: int, hi: int) -> None:
        times, rows, rest = self.scanner.scan(buf, lo, hi)
        if times.shape[1]:
            self.times.append(times)
            self.op_count += times.shape[1]
        if rows.shape[1]:
            self.graph_rows.append(rows.copy())
            self.graph_count += rows.shape[1]
            if sum(r.shape[1] for r in self.graph_rows) >= _GRAPH_BATCH:
                self.flush_graphs()
        for a, b in rest.T.tolist():
            self.rest.append(buf[a:b])
            self.rest_size += b - a
        if self.rest and not self.rest[-1].endswith(b"\n"):  # the last line, without newline: on its own
            last = self.rest.pop()
            self.flush_rest()
            self.rest.append(last)
            self.flush_rest()
        elif self.rest_size >= _REST_BATCH:
            self.flush_rest()

    def flush_rest(self) -> None:
        text = b"".join(self.rest)
        self.rest, self.rest_size = [], 0
        if not text.strip():
            return
        self.reader.parse_chunk(text)

    def _name(self, k: int) -> str:
        name = self.names.get(k)
        if name is None:
            name = self.names[k] = _decode_name(self.scanner.name_bytes(k))
        return name

    def flush_graphs(self) -> None:
        if not self.graph_rows:
            return
        g = np.concatenate(self.graph_rows, axis=1)
        self.graph_rows = []
        n = g.shape[1]
        ids, where = np.unique(g[9], return_inverse=True)
        zeros = np.zeros(n, dtype=np.int64)
        frame = pl.DataFrame(
            {
                "name": pl.Series([self._name(k) for k in ids.tolist()], dtype=pl.String).gather(where),
                "cat": pl.Series([GRAPH_CAT], dtype=pl.String).gather(zeros),
                "pid": g[0], "tid": g[1], "id": g[2], "ts": g[3], "dur": g[4], "p_idx": g[5],
                "level": g[6], "grad_enabled": g[7], "op": g[8],
                "hhash": pl.Series([self.scanner.host_hash()], dtype=pl.String).gather(zeros),
            }
        )  # fmt: skip
        self.reader.add_frame(frame)

    def op_frames(self) -> tuple[pl.DataFrame, pl.DataFrame] | None:
        """The op histogram (pid, name, cat, dur, __gop, __k, __pend, n) and the op times (pid, tid, ts, dur)."""
        if not self.op_count:
            return None
        pid, gop, k, name_index = self.scanner.op_keys()
        bin_name, dur, n = self.scanner.op_bins()
        row_of = np.zeros(int(name_index.max()) + 1, dtype=np.int64)
        row_of[name_index] = np.arange(len(name_index))
        r = row_of[bin_name]
        names = pl.Series([self._name(i) for i in name_index.tolist()], dtype=pl.String)
        pending = gop < 0  # the graph call was not known when the op was read: its parent, -2 - gop
        hist = pl.DataFrame(
            {
                "pid": pid[r],
                "name": names.gather(r),
                "cat": pl.Series(["dynamo"], dtype=pl.String).gather(np.zeros(len(r), dtype=np.int64)),
                "dur": dur,
                "__gop": pl.Series(np.where(pending, 0, gop)[r])
                .cast(pl.String)
                .scatter(np.flatnonzero(pending[r]), None),
                "__k": k[r],
                "__pend": pl.Series(-2 - gop[r]).scatter(np.flatnonzero(~pending[r]), None),
                "n": n,
            }
        )
        t = np.concatenate(self.times, axis=1) if len(self.times) > 1 else self.times[0]
        times = pl.DataFrame({"pid": t[0], "tid": t[1], "ts": t[2], "dur": t[3]})
        return hist, times


@dataclass
class FastRead:
    """One file read through the scanner: the rows it kept, what reading found, the FileReader (whose
    metadata resolves the op histogram), and how many op and graph-call lines the scanner took."""

    frame: pl.DataFrame
    info: ReadInfo
    reader: FileReader
    ops_taken: int
    graphs_taken: int


def read_fast(path: str | os.PathLike, columns: list[str], reducer: OpReducer) -> FastRead | None:
    """`reader.read_file_reduced(path, columns=columns, reducer=reducer)` with op and graph-call lines
    taken by the scanner (into `reducer`). None when the file is not line-oriented (a JSON document):
    use the general reader."""
    name, data = _lines.read_bytes(path)
    if not data.strip():
        return None
    reader = FileReader(name, columns, reducer)
    pieces = _pieces(data, reader.log)
    del data
    first, text = _sniff_text(pieces)
    if not first or _lines.sniff(text, name) == _lines.DOCUMENT:
        return None
    scan = _FileScan(reader)
    for buf, lo, hi in itertools.chain(first, pieces):
        scan.add(buf, lo, hi)
    scan.flush_rest()
    scan.flush_graphs()
    ops = scan.op_frames()
    if ops is not None:
        reducer.add_taken(*ops)
    reader.add_taken(rows=scan.op_count + scan.graph_count, reduced=scan.op_count)
    reader.check_is_trace()
    frame = reader.finish()
    return FastRead(frame, reader.info(), reader, scan.op_count, scan.graph_count)


def file_partial(path: str | os.PathLike) -> Partial:
    """Read one file (only the columns summaries need) and pre-aggregate it.

    dynascope's own op and graph-call lines are found and parsed at the byte level; everything else goes
    through the general reader. The same Partial as `partial_build.general_file_partial(path)`.
    """
    reducer = OpReducer()
    try:
        res = read_fast(path, SUMMARY_COLUMNS, reducer)
    except Fallback:
        res = None
    if res is None:
        return general_file_partial(path)
    return partial_of_file(reducer, res.frame, res.info, res.reader)
