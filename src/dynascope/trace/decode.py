"""Turn drained raw records into trace lines. Runs in the writer thread, never on the hot path.

A thread's raw stream is a run of ints broken by the odd tuple:
  -gid, t_start, t_op1, t_op2, ... t_opN   one call of graph `gid` (N = its op count); op k ran
                                           from the reading before it to its own reading
and, in a side list, (n, tuple) for each MARK - n in the int stream:
  ("B", name, cat, args, t_ns)             a user region opens
  ("E", t_ns)                              the innermost open region closes
  ("X", name, cat, ts_us, dur_us, args)    a complete event in epoch microseconds (log_event)
  ("P", name, cat, start_ns, end_ns, args) a complete event on our clock (compile phases)
  ("C", name, cat, "key,key", t_ns, value, value, t_ns, ...)
                                           counter samples (trace/memory.py): one "ph":"C" line per time
  ("I", name, path, fd, ret, start_ns, end_ns)
                                           one raw file call (fileio.py): name is open, read,
                                           write or close; a cat "POSIX" event with args fhash, fd,
                                           ret (bytes, the fd for open, -1 on failure)
Runs of ints are formatted by a compiled loop (oplines.py) off the GIL; lines are bytes.

Files are interned as DFTracer does: the first event naming a path is preceded by one `FH` record
(args name = the path, normalised with os.path.normpath; value = its 16-hex hash), and events carry
`fhash` = that hash. Region and
complete-event args (B, X, P) can name a file the same way: an arg `"__path"` (a str, bytes or
path-like; fileio.file_path makes a path absolute) is replaced by `fhash`, with its FH record written
before the event; a `"__path"` of None is dropped. (Pass it with `**{"__path": p}` or in an args dict:
a `__path=` keyword written inside a class body is name-mangled by Python.)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import orjson

from dynascope.trace import format as layout
from dynascope.trace.buffers import MARK
from dynascope.trace.hashing import hash16
from dynascope.trace.launches import DeviceRecord, LaunchIndex, by_thread, device_args, gpu_tid
from dynascope.trace.ops import TABLE
from dynascope.trace.probes import CALL_CAT, FRAME_CAT

_EMPTY = np.zeros(0, dtype=np.int64)
_RUNNING_FIELDS = ("node", "target", "layer", "file", "line", "code", "layers", "lines")  # of an op or kernel
PATH_ARG = "__path"  # a region arg naming a file: becomes `fhash` (see above)
IO_CAT = layout.POSIX_CAT
GPU_CAT = layout.GPU_CAT
_LINES_PER_PIECE = 4096
Emit = Callable[[bytes | memoryview], None]  # takes whole lines


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
        self._heads: dict[tuple[int, int], tuple[list[bytes], np.ndarray, np.ndarray, int]] = {}
        self._out = np.empty(0, dtype=np.uint8)
        self._op_numbers: dict[int, int] = {}
        self.described: set[int] = set()  # graph ids whose OH records are in the file
        self.sources_written: set[str] = set()  # kernel sources whose KS record is in the file
        self._texts: dict[str, bytes] = {}  # event names and categories as JSON
        self._hhash_bytes = hhash.encode()
        self.file_hashes: dict[str, str] = {}  # paths as recorded -> their hash (FH record written)
        self.file_names: set[str] = set()  # the (normalised) names of the FH records written
        self._io_templates: dict[tuple[str, str | None, int], bytes] = {}
        self.launches: LaunchIndex | None = None  # set while device activity is collected (launches.py)
        self._gpu_tracks: set[int] = set()  # device tracks named in this file
        self.unfinished: dict[int, dict] = {}  # tid -> the graph call it was in when the file ended (running())

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
        elif spec.cat in _REFERRING_CATS:
            attribution = ',"op":%d' % self.op_number(index)
        else:
            attribution = ""
        is_op = spec.cat == layout.OP_CAT
        level = depth + (2 if is_op else 1)  # ops sit inside their graph call
        return layout.head(
            orjson.dumps(spec.name).decode(), spec.cat, int(self.pid), int(tid), int(spec.grad_enabled), int(level),
            hhash=None if is_op else self.hhash,  # constant; the HH record has it
            attribution=attribution,
        )  # fmt: skip

    def op_number(self, index: int) -> int:
        """The small integer events use to refer to a spec's OH record in this file."""
        number = self._op_numbers.get(index)
        if number is None:
            number = self._op_numbers[index] = len(self._op_numbers) + 1
        return number

    def heads(self, tid: int, depth: int) -> tuple[np.ndarray, np.ndarray, int]:
        """Every spec's line head for thread `tid` at region depth `depth`, concatenated: spec i's head
        is heads[starts[i]:starts[i + 1]]. Also the longest head's length."""
        cached = self._heads.get((tid, depth))
        specs = len(TABLE.specs)
        if cached is None or len(cached[0]) < specs:
            known = [] if cached is None else cached[0]
            known += [self._head(index, tid, depth).encode() for index in range(len(known), specs)]
            lengths = np.fromiter(map(len, known), dtype=np.int64, count=len(known))
            starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            heads = np.frombuffer(b"".join(known), dtype=np.uint8)
            cached = self._heads[(tid, depth)] = (known, heads, starts, int(lengths.max(initial=0)))
        return cached[1], cached[2], cached[3]

    def describe(self, gids: np.ndarray, tid: int) -> list[bytes]:
        """OH metadata lines (and KS lines of kernel sources) for graphs not yet described in this file."""
        lines = []
        for gid in np.unique(gids).tolist():
            if gid in self.described or gid <= 0 or gid >= len(TABLE.arrays()[0]):
                continue
            self.described.add(gid)
            graph_index, *op_indexes = TABLE.graph_specs(gid)
            lines += self.source_lines(op_indexes, tid)
            if self.inline_args:
                continue
            graph_number = self.op_number(graph_index)
            lines.append(self.oh_line(graph_index, tid, graph_number, -1))
            for position, index in enumerate(op_indexes):
                lines.append(self.oh_line(index, tid, graph_number, position))
        return lines

    def source_lines(self, indexes: list[int], tid: int) -> list[bytes]:
        """KS records: the code of each kernel whose source this file has not given yet."""
        lines = []
        for index in indexes:
            key = TABLE.specs[index].attrs.get("kernel_code")
            if not key or key in self.sources_written:
                continue
            self.sources_written.add(key)
            args = {"hhash": self.hhash, "value": key, "text": TABLE.sources.get(key, "")}
            record = {"name": "KS", "cat": "dynascope", "pid": self.pid, "tid": tid, "ph": "M", "args": args}
            lines.append(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
        return lines

    def oh_line(self, index: int, tid: int, graph_number: int, position: int) -> bytes:
        spec = TABLE.specs[index]
        args = {"hhash": self.hhash, "value": self.op_number(index), "hash": spec.ref}
        if position >= 0:
            args.update({"graph_op": graph_number, "index": position})
        args.update(spec.attrs)
        record = {"name": "OH", "cat": "dynascope", "pid": self.pid, "tid": tid, "ph": "M", "args": args}
        return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)

    # -- one drained chunk ----------------------------------------------------------------------

    def decode(self, stream: ThreadStream, chunk: list, side: Callable[[int], list], final: bool, emit: Emit) -> None:
        """Write the lines for `chunk` through `emit`, in pieces of whole lines; `side(n)` hands over
        the (number, record) side records numbered up to n.

        `emit(data)` must use `data` before it returns: the formatter's buffer is reused.
        With `final`, nothing is held back for a later drain.
        """
        values = np.fromiter(chunk, dtype=np.int64, count=len(chunk))
        if stream.pending.size:
            values = np.concatenate([stream.pending, values])
            stream.pending = _EMPTY
        marks = np.flatnonzero(values <= MARK)
        numbers = (MARK - values[marks]).tolist()
        records = dict(side(max(numbers))) if numbers else {}
        start = 0
        lines: list[bytes] = []  # Python-side lines, handed on together (one compress call, not one each)
        for position, number in zip(marks.tolist(), numbers, strict=True):
            if position > start:
                if lines:
                    emit(b"".join(lines))
                    lines.clear()
                self._int_run(stream, values[start:position], False, emit)
            record = records.pop(number, None)
            line = self._python_record(stream, record) if record is not None else None
            if line:
                lines.append(line)
                if len(lines) >= _LINES_PER_PIECE:
                    emit(b"".join(lines))
                    lines.clear()
            start = position + 1
        if lines:
            emit(b"".join(lines))
        self.dropped += len(records)  # side records whose MARK never made it (interrupted)
        if start < values.size:
            self._int_run(stream, values[start:], not final, emit)
        if final:
            for line in self.close_regions(stream, None):
                emit(line)

    def _int_run(self, stream: ThreadStream, values: np.ndarray, hold_tail: bool, emit: Emit) -> None:
        """The lines of a run of graph calls (no MARKs in it), formatted by the compiled loop."""
        from dynascope.trace import (
            oplines,  # numba: imported by the first session that writes, not by `import dynascope`
        )

        graph_spec, op_base, n_ops = TABLE.arrays()
        for line in self.describe(-values[values < 0], stream.tid):
            emit(line)
        if not hold_tail:
            self._note_unfinished(stream.tid, values, n_ops)
        parent, depth = self._parent(stream)
        heads, starts, max_head = self.heads(stream.tid, depth)
        out = self._buffer(max_head + oplines.LINE_TAIL_MAX, int(n_ops.max()) + 1)
        index = 0
        while True:
            why, index, size, self.next_id, events, dropped = oplines.format_calls(
                values, index, graph_spec, op_base, n_ops, heads, starts, max_head,
                parent, self.next_id, self.offset_ns, hold_tail, out,
            )  # fmt: skip
            self.events += events
            self.dropped += dropped
            if size:
                emit(out.data[:size])
            if why == oplines.HELD:
                stream.pending = values[index:].copy()
            if why != oplines.BUFFER_FULL:
                if self.launches is not None:  # device activity is collected: keep what launched it
                    self.launches.add(stream.tid, values[:index] if why == oplines.HELD else values)
                return

    def _note_unfinished(self, tid: int, values: np.ndarray, n_ops: np.ndarray) -> None:
        """Remember the thread's last graph call in `values` that stopped before its last op finished (an
        exception raised inside the graph, or the process ending in it): what was running (running())."""
        headers = np.flatnonzero(values < 0)
        if headers.size == 0:
            return
        gids = -values[headers]
        readings = np.diff(np.append(headers, values.size)) - 1
        known = (gids > 0) & (gids < n_ops.size)
        cut = np.flatnonzero(known & (readings < n_ops[np.where(known, gids, 0)] + 1))
        if cut.size:
            last = int(cut[-1])
            self.unfinished[tid] = {"gid": int(gids[last]), "ops_done": max(int(readings[last]) - 1, 0)}

    def running(self) -> list[dict]:
        """Per thread, the last graph call that stopped inside (for a program that ended with an error: what
        was running when it was raised): the graph, and the op (or kernel) that had started but not
        finished, with its attribution (layer, file, line)."""
        out = []
        for tid, call in self.unfinished.items():
            graph_index, *op_indexes = TABLE.graph_specs(call["gid"])
            graph = TABLE.specs[graph_index]
            row = {"tid": tid, "graph": graph.attrs.get("graph"), "phase": graph.attrs.get("phase"),
                   "compile_id": graph.attrs.get("compile_id"), "event": graph.name}  # fmt: skip
            if call["ops_done"] < len(op_indexes):
                op = TABLE.specs[op_indexes[call["ops_done"]]]
                row["op"] = op.name
                row.update({k: op.attrs[k] for k in _RUNNING_FIELDS if op.attrs.get(k)})
            out.append(row)
        return out

    def _buffer(self, line_max: int, call_lines: int) -> np.ndarray:
        """The formatter's output buffer: 1 MB (it stays in cache), or room for the longest call."""
        size = max(1 << 20, line_max * call_lines)
        if self._out.size < size:
            self._out = np.empty(size, dtype=np.uint8)
        return self._out

    # -- device activity (launches.py) ----------------------------------------------------------

    def device_lines(self, records: list[DeviceRecord]) -> bytes:
        """The lines of device activity records: each joined to the op that launched it, on its own track."""
        launchers = np.full(len(records), -1, dtype=np.int64)
        if self.launches is not None:
            for tid, picks in by_thread(records).items():
                at = np.fromiter((records[i].launch_ns for i in picks), dtype=np.int64, count=len(picks))
                launchers[picks] = self.launches.launchers(tid, at)
        lines = []
        for record, spec in zip(records, launchers.tolist(), strict=True):
            tid = gpu_tid(record.device, record.stream)
            if tid not in self._gpu_tracks:
                self._gpu_tracks.add(tid)
                lines.append(self.track_name_line(tid, f"GPU {record.device} stream {record.stream}"))
            number = self.op_number(spec) if spec >= 0 else None
            name = TABLE.specs[spec].name if spec >= 0 else None
            ts = (record.start_ns + self.offset_ns) // 1000
            dur = (record.end_ns + self.offset_ns) // 1000 - ts
            args = device_args(record, number, name, self.offset_ns)
            lines.append(self.event_line(self._take_id(), record.name, GPU_CAT, tid, ts, dur, -1, 1, args))
        return b"".join(lines)

    def track_name_line(self, tid: int, name: str) -> bytes:
        record = {"name": "thread_name", "cat": "dftracer", "pid": self.pid, "tid": tid, "ph": "M",
                  "args": {"hhash": self.hhash, "name": name, "value": "thread_name"}}  # fmt: skip
        return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)

    # -- Python-side records --------------------------------------------------------------------

    def _parent(self, stream: ThreadStream) -> tuple[int, int]:
        if stream.regions:
            return stream.regions[-1].event_id, len(stream.regions)
        return -1, 0

    def _take_id(self) -> int:
        event_id = self.next_id
        self.next_id += 1
        return event_id

    def _python_record(self, stream: ThreadStream, record: tuple) -> bytes | None:
        kind = record[0]
        if kind == "I":
            return self._io_line(stream, record)
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
        if kind == "C":
            return self.counter_lines(stream.tid, *record[1:])
        if kind in ("X", "P"):
            parent, depth = self._parent(stream)
            files, args = self._file_args(stream.tid, args)
            line = self.event_line(self._take_id(), name, cat, stream.tid, ts_us, dur_us, parent, depth + 1, args)
            return files + line
        self.dropped += 1
        return None

    def _io_line(self, stream: ThreadStream, record: tuple) -> bytes:
        """One POSIX event, as event_line writes it, from a template per (name, file, thread): I/O
        events can come by the hundred thousand a second, and the writer thread shares the GIL."""
        _, name, path, fd, ret, start_ns, end_ns = record
        template = self._io_templates.get((name, path, stream.tid))
        files = b""
        if template is None:
            files, template = self._io_template(name, path, stream.tid)
        ts = (start_ns + self.offset_ns) // 1000
        dur = (end_ns + self.offset_ns) // 1000 - ts
        regions = stream.regions
        parent, level = (regions[-1].event_id, len(regions) + 1) if regions else (-1, 1)
        event_id = self.next_id
        self.next_id += 1
        self.events += 1
        # ret None: a non-blocking file had nothing to give or take (EAGAIN)
        return files + template % (event_id, ts, max(dur, 0), parent, level, fd, -1 if ret is None else ret)

    def _io_template(self, name: str, path: str | None, tid: int) -> tuple[bytes, bytes]:
        """The FH record `path` needs first (or b""), and the %-template of its `name` events on `tid`."""
        files = b""
        fhash = b""
        if path is not None:
            digest, files = self.file_hash(path, tid)
            fhash = b',"fhash":' + orjson.dumps(digest)
        static = [
            b'{"id":%d,"name":', orjson.dumps(name).replace(b"%", b"%%"), b',"cat":"', IO_CAT.encode(),
            b'","pid":', b"%d" % self.pid, b',"tid":', b"%d" % tid, b',"ts":%d,"dur":%d,"ph":"X","args":{"hhash":',
            orjson.dumps(self.hhash).replace(b"%", b"%%"), b',"p_idx":%d,"level":%d', fhash, b',"fd":%d,"ret":%d}}\n',
        ]  # fmt: skip
        template = self._io_templates[(name, path, tid)] = b"".join(static)
        return files, template

    def file_hash(self, path: str, tid: int) -> tuple[str, bytes]:
        """The hash events use for `path`, and its FH record if this file has not written it yet.

        The name is normalised here, once per path (`/data/./a.pt` and `/data/x/../a.pt` are one
        file, `/data/a.pt`, as os.path.abspath gives it): the hot path only made it absolute.
        """
        fhash = self.file_hashes.get(path)
        if fhash is not None:
            return fhash, b""
        name = os.path.normpath(path)
        fhash = self.file_hashes[path] = hash16(name)
        if name in self.file_names:
            return fhash, b""
        self.file_names.add(name)
        args = {"hhash": self.hhash, "name": name, "value": fhash}
        record = {"name": "FH", "cat": "dftracer", "pid": self.pid, "tid": tid, "ph": "M", "args": args}
        return fhash, orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)

    def _file_args(self, tid: int, args: dict | None) -> tuple[bytes, dict | None]:
        """Args with a `__path` replaced by `fhash`, and the FH record that must come first (or b"")."""
        if not args or PATH_ARG not in args:
            return b"", args
        args = dict(args)
        path = args.pop(PATH_ARG)
        if path is None:
            return b"", args
        if not isinstance(path, str):
            try:
                path = os.fsdecode(os.fspath(path))
            except TypeError:
                path = str(path)
        fhash, files = self.file_hash(path, tid)
        return files, {"fhash": fhash, **args}

    def _region_line(self, stream: ThreadStream, end_ns: int) -> bytes:
        region = stream.regions.pop()
        parent, depth = self._parent(stream)
        ts = (region.start_ns + self.offset_ns) // 1000
        dur = (end_ns + self.offset_ns) // 1000 - ts
        files, args = self._file_args(stream.tid, region.args)
        return files + self.event_line(
            region.event_id, region.name, region.cat, stream.tid, ts, dur, parent, depth + 1, args
        )

    def close_regions(self, stream: ThreadStream, end_ns: int | None) -> list[bytes]:
        """Close regions still open at the end of the trace (an exception, Ctrl-C, finalize inside a step)."""
        from dynascope.trace.buffers import now_ns

        end = now_ns() if end_ns is None else end_ns
        return [self._region_line(stream, end) for _ in range(len(stream.regions))]

    def event_line(self, event_id, name, cat, tid, ts, dur, parent, level, args) -> bytes:
        """One complete event of a Python-side record. Formatted from a template (a dict and orjson per
        line cost twice as much, and this runs under the GIL the traced program needs)."""
        self.events += 1
        if args and not _RESERVED_ARGS.isdisjoint(args):  # args that override ours: as a dict would have it
            record = {
                "id": event_id, "name": name, "cat": cat, "pid": self.pid, "tid": tid, "ts": int(ts),
                "dur": max(int(dur), 0), "ph": "X",
                "args": {"hhash": self.hhash, "p_idx": parent, "level": level, **args},
            }  # fmt: skip
            return orjson.dumps(record, default=str, option=orjson.OPT_APPEND_NEWLINE)
        extra = b"," + orjson.dumps(args, default=str)[1:-1] if args else b""
        return _EVENT_LINE % (
            event_id, self._json_text(name), self._json_text(cat), self.pid, tid, int(ts), max(int(dur), 0),
            self._hhash_bytes, parent, level, extra,
        )  # fmt: skip

    def counter_lines(self, tid: int, name: str, cat: str, keys: str, *flat: int) -> bytes:
        """Counter samples ("ph":"C"), from a record laid flat so that the garbage collector need not track it:
        `keys` the series' names ("rss", "cuda_allocated,cuda_reserved"), then per sample its time and one
        value per series."""
        head = b'{"name":%s,"cat":%s,"pid":%d,"tid":%d,"ph":"C","ts":' % (
            self._json_text(name), self._json_text(cat), self.pid, tid)
        names = [b'"%s":' % key.encode() for key in keys.split(",")]
        width = len(names) + 1
        lines = []
        for at in range(0, len(flat) - width + 1, width):
            fields = b",".join(key + b"%d" % value for key, value in zip(names, flat[at + 1 : at + width], strict=True))
            lines.append(head + b'%d,"args":{%s}}\n' % ((flat[at] + self.offset_ns) // 1000, fields))
        return b"".join(lines)  # samples, not events: the end record's num_events leaves them out

    def _json_text(self, value: object) -> bytes:
        """A name or category as JSON, remembered (a few hundred distinct ones at most in practice)."""
        text = self._texts.get(value)  # type: ignore[call-overload]
        if text is None:
            if len(self._texts) > 4096:
                self._texts.clear()
            text = orjson.dumps(value, default=str)
            if isinstance(value, str):
                self._texts[value] = text
        return text


# the line of a Python-side complete event; the same keys, in the same order, as the dict form
_EVENT_LINE = (
    b'{"id":%d,"name":%b,"cat":%b,"pid":%d,"tid":%d,"ts":%d,"dur":%d,"ph":"X",'
    b'"args":{"hhash":"%b","p_idx":%d,"level":%d%b}}\n'
)
_RESERVED_ARGS = frozenset(("hhash", "p_idx", "level"))
# events whose line names their OH record (`op`): graph calls, and probes (frames, compiled calls)
_REFERRING_CATS = frozenset((layout.GRAPH_CAT, FRAME_CAT, CALL_CAT))
