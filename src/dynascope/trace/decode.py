"""Turn drained raw records into trace lines. Runs in the writer thread, never on the hot path.

A thread's raw stream is a run of ints broken by the odd tuple:
  -gid, t_start, t_op1, t_op2, ... t_opN   one call of graph `gid` (N = its op count); op k ran
                                           from the reading before it to its own reading
and, in a side list, (n, tuple) for each MARK - n in the int stream:
  ("B", name, cat, args, t_ns)             a user region opens
  ("E", t_ns)                              the innermost open region closes
  ("X", name, cat, ts_us, dur_us, args)    a complete event in epoch microseconds (log_event)
  ("P", name, cat, start_ns, end_ns, args) a complete event on our clock (compile phases)
Integer runs are decoded with numpy and formatted by polars, mostly off the GIL.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import orjson
import polars as pl

from .buffers import MARK
from .ops import TABLE, OpSpec

_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass
class OpenRegion:
    event_id: int
    name: str
    cat: str
    args: dict
    start_ns: int


@dataclass
class ThreadStream:
    """Decoding state that must survive from one drain of a thread's buffer to the next."""

    tid: int
    pending: np.ndarray = field(default_factory=lambda: _EMPTY)  # the tail of a graph call cut by the drain
    regions: list[OpenRegion] = field(default_factory=list)


class Decoder:
    def __init__(self, pid: int, hhash: str, offset_ns: int, inline_args: bool) -> None:
        self.pid = pid
        self.hhash = hhash
        self.offset_ns = offset_ns  # perf_counter_ns + offset_ns = epoch ns
        self.inline_args = inline_args
        self.next_id = 2  # 1 is the start record
        self.events = 0
        self.dropped = 0
        self._heads: dict[tuple[int, int], pl.Series] = {}
        self._op_numbers: dict[int, int] = {}
        self.described: set[int] = set()  # graph ids whose OH records are in the file

    # -- static strings -------------------------------------------------------------------------

    def _head(self, index: int, tid: int, depth: int) -> str:
        """The static start of one spec's event lines on thread `tid` under `depth` open regions,
        up to and including its `level`.

        What changes from event to event (level, p_idx, id, ts, dur) comes after it, so that deflate
        matches each line's long static part in one piece. Op events carry no reference of their own:
        op k of a graph call has id = p_idx + 1 + k, and the parent graph event names the graph's OH.
        """
        spec = TABLE.specs[index]
        if self.inline_args:
            fields = orjson.dumps(spec.attrs).decode()[1:-1]
            attribution = "," + fields if fields else ""
        elif spec.cat == "dynamo.graph":
            attribution = ',"op":%d' % self.op_number(index)
        else:
            attribution = ""
        host = "" if spec.cat == "dynamo" else '"hhash":"%s",' % self.hhash  # constant; the HH record has it
        level = depth + (2 if spec.cat == "dynamo" else 1)  # ops sit inside their graph call
        return '{"name":%s,"cat":"%s","pid":%d,"tid":%d,"ph":"X","args":{%s"grad_enabled":%d%s,"level":%d' % (
            orjson.dumps(spec.name).decode(), spec.cat, self.pid, tid, host, spec.grad_enabled, attribution, level,
        )  # fmt: skip

    def op_number(self, index: int) -> int:
        """The small integer events use to refer to a spec's OH record in this file."""
        number = self._op_numbers.get(index)
        if number is None:
            number = self._op_numbers[index] = len(self._op_numbers) + 1
        return number

    def heads(self, tid: int, depth: int) -> pl.Series:
        """Every spec's line head for thread `tid` at region depth `depth`, indexable by spec index."""
        heads = self._heads.get((tid, depth))
        specs = len(TABLE.specs)
        if heads is None or len(heads) < specs:
            known = [] if heads is None else heads.to_list()
            known += [self._head(index, tid, depth) for index in range(len(known), specs)]
            heads = self._heads[(tid, depth)] = pl.Series(known, dtype=pl.String)
        return heads

    def describe(self, gids: np.ndarray, tid: int) -> list[str]:
        """OH metadata lines for graphs not yet described in this file."""
        if self.inline_args:
            return []
        lines = []
        for gid in np.unique(gids).tolist():
            if gid in self.described or gid <= 0 or gid >= len(TABLE.arrays()[0]):
                continue
            self.described.add(gid)
            graph_index, *op_indexes = TABLE.graph_specs(gid)
            graph_number = self.op_number(graph_index)
            lines.append(self.oh_line(graph_index, tid, graph_number, -1))
            for position, index in enumerate(op_indexes):
                lines.append(self.oh_line(index, tid, graph_number, position))
        return lines

    def oh_line(self, index: int, tid: int, graph_number: int, position: int) -> str:
        spec = TABLE.specs[index]
        args = {"hhash": self.hhash, "value": self.op_number(index), "hash": spec.ref}
        if position >= 0:
            args.update({"graph_op": graph_number, "index": position})
        args.update(spec.attrs)
        record = {"name": "OH", "cat": "dynascope", "pid": self.pid, "tid": tid, "ph": "M", "args": args}
        return orjson.dumps(record).decode()

    # -- one drained chunk ----------------------------------------------------------------------

    def decode(self, stream: ThreadStream, chunk: list, side: Callable[[int], list], final: bool) -> list[str]:
        """Lines for `chunk`; `side(n)` hands over the (number, record) side records numbered up to n.

        With `final`, nothing is held back for a later drain.
        """
        values = np.fromiter(chunk, dtype=np.int64, count=len(chunk))
        if stream.pending.size:
            values = np.concatenate([stream.pending, values])
            stream.pending = _EMPTY
        marks = np.flatnonzero(values <= MARK)
        numbers = (MARK - values[marks]).tolist()
        records = dict(side(max(numbers))) if numbers else {}
        lines: list[str] = []
        start = 0
        for position, number in zip(marks.tolist(), numbers):
            if position > start:
                lines.extend(self._int_runs(stream, values[start:position], hold_tail=False))
            record = records.pop(number, None)
            line = self._python_record(stream, record) if record is not None else None
            if line:
                lines.append(line)
            start = position + 1
        self.dropped += len(records)  # side records whose MARK never made it (interrupted)
        if start < values.size:
            lines.extend(self._int_runs(stream, values[start:], hold_tail=not final))
        if final:
            lines.extend(self.close_regions(stream, None))
        return lines

    def _int_runs(self, stream: ThreadStream, run: np.ndarray, hold_tail: bool, size: int = 1 << 16) -> list[str]:
        """Decode a run of ints in pieces of about `size`, cut at graph-call headers.

        numpy over a few hundred thousand fresh elements costs more than the same work in
        cache-sized pieces; cutting at headers means no call is split.
        """
        if run.size <= size:
            return self._int_run(stream, run, hold_tail)
        headers = np.flatnonzero(run < 0)
        cuts = np.unique(headers[np.minimum(np.searchsorted(headers, np.arange(size, run.size, size)), headers.size - 1)])
        cuts = cuts[cuts > 0]
        lines: list[str] = []
        for index, piece in enumerate(np.split(run, cuts)):
            lines.extend(self._int_run(stream, piece, hold_tail and index == len(cuts)))
        return lines

    def _int_run(self, stream: ThreadStream, values: np.ndarray, hold_tail: bool) -> list[str]:
        graph_spec, op_base, n_ops = TABLE.arrays()
        is_header = values < 0
        headers = np.flatnonzero(is_header)
        if headers.size == 0:
            self.dropped += values.size
            return []
        if headers[0] > 0:  # readings with no graph call to belong to
            self.dropped += int(headers[0])
            values = values[headers[0] :]
            is_header = is_header[headers[0] :]
            headers = headers - headers[0]
        gids = -values[headers]
        if int(gids.max()) >= len(n_ops):  # a graph registered after the table snapshot
            graph_spec, op_base, n_ops = TABLE.arrays()
        gids = np.where(gids < len(n_ops), gids, 0)  # graph 0 has no spec and no ops: its readings drop
        segment = np.cumsum(is_header) - 1
        position = np.arange(values.size) - headers[segment]
        expected = n_ops[gids] + 2  # header, start, one reading per op
        if hold_tail and position[-1] < expected[-1] - 1:
            stream.pending = values[int(headers[-1]) :].copy()
            keep = int(headers[-1])
            if keep == 0:
                return []
            values, is_header, segment, position = values[:keep], is_header[:keep], segment[:keep], position[:keep]
            headers, gids, expected = headers[:-1], gids[:-1], expected[:-1]
        seg_expected = expected[segment]
        is_op = (position >= 2) & (position < seg_expected)
        self.dropped += int(np.count_nonzero(position >= seg_expected))
        start_at = headers + 1
        has_start = start_at < values.size
        has_start[has_start] = ~is_header[start_at[has_start]]
        has_start &= gids > 0
        is_graph = np.zeros(values.size, dtype=bool)
        is_graph[headers[has_start]] = True
        is_event = is_graph | is_op
        ids = self.next_id + np.cumsum(is_event) - 1
        count = int(np.count_nonzero(is_event))
        self.next_id += count
        self.events += count
        if count == 0:
            return []
        parent, depth = self._parent(stream)
        offset = self.offset_ns

        # Every column is gathered at the event positions, which flatnonzero returns in order: a graph
        # call's event, then its ops. No sort needed.
        at = np.flatnonzero(is_event)
        graph_at = is_graph[at]
        seg_at = segment[at]
        gid_at = gids[seg_at]
        last_reading = np.maximum.reduceat(np.where(is_op | (position == 1), np.arange(values.size), 0), headers)
        start_ns = np.where(graph_at, values[np.minimum(at + 1, values.size - 1)], values[at - 1])
        end_ns = np.where(graph_at, values[last_reading[seg_at]], values[at])
        ts = (start_ns + offset) // 1000
        frame = pl.DataFrame(
            {
                "spec": np.where(graph_at, graph_spec[gid_at], op_base[gid_at] + position[at] - 2),
                "p_idx": np.where(graph_at, parent, ids[headers[seg_at]]),
                "id": ids[at],
                "ts": ts,
                "dur": (end_ns + offset) // 1000 - ts,
            }
        )
        g_seg = np.flatnonzero(has_start)
        lines = self.describe(gids[g_seg], stream.tid)
        lines.extend(self._format(frame, stream.tid, depth))
        return lines

    def _format(self, frame: pl.DataFrame, tid: int, depth: int, slice_rows: int = 8192) -> list[str]:
        """Event lines, in pieces of `slice_rows` lines joined by newlines; columns spec, p_idx, id, ts, dur.

        polars builds the strings in Rust without holding the GIL, so the traced program keeps
        running meanwhile; small pieces keep the working set in cache.
        """
        heads = self.heads(tid, depth)
        line = pl.concat_str(
            [
                pl.col("head"),
                pl.lit(',"p_idx":'), pl.col("p_idx").cast(pl.String),
                pl.lit('},"id":'), pl.col("id").cast(pl.String),
                pl.lit(',"ts":'), pl.col("ts").cast(pl.String),
                pl.lit(',"dur":'), pl.col("dur").cast(pl.String),
                pl.lit("}"),
            ]
        ).str.join("\n")  # fmt: skip
        frame = frame.with_columns(heads.gather(frame["spec"]).alias("head"))  # frames are <= 64K rows
        return [frame.slice(start, slice_rows).select(line).item() for start in range(0, frame.height, slice_rows)]

    # -- Python-side records --------------------------------------------------------------------

    def _parent(self, stream: ThreadStream) -> tuple[int, int]:
        if stream.regions:
            return stream.regions[-1].event_id, len(stream.regions)
        return -1, 0

    def _take_id(self) -> int:
        event_id = self.next_id
        self.next_id += 1
        return event_id

    def _python_record(self, stream: ThreadStream, record: tuple) -> str | None:
        kind = record[0]
        if kind == "B":
            _, name, cat, args, start_ns = record
            stream.regions.append(OpenRegion(self._take_id(), name, cat, args, start_ns))
            return None
        if kind == "E":
            if not stream.regions:
                self.dropped += 1
                return None
            return self._region_line(stream, record[1])
        if kind == "X":
            _, name, cat, ts_us, dur_us, args = record
        elif kind == "P":
            _, name, cat, start_ns, end_ns, args = record
            ts_us = (start_ns + self.offset_ns) // 1000
            dur_us = (end_ns + self.offset_ns) // 1000 - ts_us
        if kind in ("X", "P"):
            parent, depth = self._parent(stream)
            return self.event_line(self._take_id(), name, cat, stream.tid, ts_us, dur_us, parent, depth + 1, args)
        self.dropped += 1
        return None

    def _region_line(self, stream: ThreadStream, end_ns: int) -> str:
        region = stream.regions.pop()
        parent, depth = self._parent(stream)
        ts = (region.start_ns + self.offset_ns) // 1000
        dur = (end_ns + self.offset_ns) // 1000 - ts
        return self.event_line(region.event_id, region.name, region.cat, stream.tid, ts, dur, parent, depth + 1, region.args)

    def close_regions(self, stream: ThreadStream, end_ns: int | None) -> list[str]:
        """Close regions still open at the end of the trace (an exception, Ctrl-C, finalize inside a step)."""
        from .buffers import now_ns

        end = now_ns() if end_ns is None else end_ns
        return [self._region_line(stream, end) for _ in range(len(stream.regions))]

    def event_line(self, event_id, name, cat, tid, ts, dur, parent, level, args) -> str:
        self.events += 1
        record = {
            "id": event_id,
            "name": name,
            "cat": cat,
            "pid": self.pid,
            "tid": tid,
            "ts": int(ts),
            "dur": max(int(dur), 0),
            "ph": "X",
            "args": {"hhash": self.hhash, "p_idx": parent, "level": level, **(args or {})},
        }
        return orjson.dumps(record, default=str).decode()

