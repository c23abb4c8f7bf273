"""What one JSON record of a trace means: the one place that knows the record kinds.

- `ph` as a string or as pydftracer's integer code (1 X, 2 C, 3 aggregated, 4 M);
- metadata (`M`): `HH`/`FH`/`SH` hash tables, `OH` attribution records (and their positional index:
  op k of a graph call is the record with that graph's `graph_op` and `index` k), `process_name`,
  `thread_name`, gathered into a file's `FileTables`;
- `B`/`E` pairs on one (pid, tid) become one complete event (the `E` args win);
- complete events (`X`) become rows: top-level fields, then every `args` key (one that clashes with a
  top-level name is `arg_<key>`); `start` gives the process's rank, `end` the writer's dropped count;
- instants and counters are marks (kept when asked for); flows, async and object records are skipped
  and counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson
import polars as pl

from dynascope.analyze.read.columns import MEMORY_CAT, dict_columns_frame
from dynascope.analyze.read.readinfo import FileLog

__all__ = ["PH_BY_CODE", "TOP_KEYS", "FileTables", "RecordReader", "hash_keys", "phase_of"]

PH_BY_CODE = {1: "X", 2: "C", 3: "A", 4: "M"}
TOP_KEYS = ("id", "name", "cat", "type", "pid", "tid", "ts", "dur", "ph")
MARK_PHASES = frozenset({"i", "I", "C", "n", "R"})  # instants, counters, marks
_OH_BOOKKEEPING = ("value", "hhash", "hash", "graph_op", "index")
_ROWS_PER_FRAME = 200_000


def phase_of(ph) -> str | None:
    """A record's `ph` as Chrome's letter (integer codes mapped)."""
    return PH_BY_CODE.get(ph, str(ph)) if isinstance(ph, int) else ph


def hash_keys(value) -> list[str]:
    """Every spelling an event may use for the hash `value` (hex string or integer)."""
    if isinstance(value, bool):
        return [str(value)]
    if isinstance(value, int):
        return [str(value), format(value & 0xFFFFFFFFFFFFFFFF, "016x")]
    s = str(value).strip().lower()
    keys = [s]
    try:
        keys.append(str(int(s, 16)))
    except ValueError:
        pass
    return keys


def as_int(v: Any) -> Any:
    """`v` as an int where it reads as one, else `v` unchanged."""
    try:
        return int(v)
    except (TypeError, ValueError):
        return v


@dataclass
class FileTables:
    """A file's metadata: what its hashes and references resolve to."""

    hosts: dict[str, str] = field(default_factory=dict)  # HH: hash -> host name
    files: dict[str, str] = field(default_factory=dict)  # FH: hash -> path
    strings: dict[str, str] = field(default_factory=dict)  # SH: hash -> string
    oh: dict[str, dict] = field(default_factory=dict)  # OH: reference -> attribution fields
    oh_index: dict[tuple[str, int], str] = field(default_factory=dict)  # (graph op, k) -> OH reference
    # pid (as read: an int unless the file has an odd one) -> rank, world_size, local_rank, process_name
    proc: dict[Any, dict] = field(default_factory=dict)
    thread_names: dict[tuple, str] = field(default_factory=dict)  # (pid, tid) -> name
    sources: dict[str, str] = field(default_factory=dict)  # KS: kernel source hash -> code

    def add_metadata(self, e: dict, args: dict) -> None:
        name = e.get("name")
        if name in ("HH", "FH", "SH"):
            value, text = args.get("value"), args.get("name")
            if value is None or text is None:
                return
            table = self.hosts if name == "HH" else self.files if name == "FH" else self.strings
            for k in hash_keys(value):
                table[k] = str(text)
        elif name == "OH":
            self._add_oh(args)
        elif name == "KS" and isinstance(args.get("text"), str) and args.get("value") is not None:
            self.sources[str(args["value"]).lower()] = args["text"]
        elif name == "process_name":
            pid = e.get("pid")
            if pid is not None and "name" in args:
                self.proc.setdefault(as_int(pid), {})["process_name"] = str(args["name"])
        elif name == "thread_name" and "name" in args:
            self.thread_names[(e.get("pid"), e.get("tid"))] = str(args["name"])

    def _add_oh(self, args: dict) -> None:
        value = args.get("value")
        if value is None:
            return
        attrs = {k: v for k, v in args.items() if k not in _OH_BOOKKEEPING}
        keys = hash_keys(value)
        for k in keys + (hash_keys(args["hash"]) if args.get("hash") is not None else []):
            self.oh[k] = attrs
        # op events may carry no reference: op k of a graph call has id = p_idx + 1 + k, and the
        # graph event's `op` names the graph (graph_op) whose op k this record describes
        if args.get("graph_op") is not None and isinstance(args.get("index"), int):
            for g in hash_keys(args["graph_op"]):
                self.oh_index[(g, args["index"])] = keys[0]

    def add_process_facts(self, e: dict, args: dict) -> None:
        info = self.proc.setdefault(as_int(e.get("pid")), {})
        for k in ("rank", "world_size", "local_rank"):
            if k in args:
                info[k] = args[k]


class RecordReader:
    """Takes one file's records (dicts or JSON lines): metadata into `tables`, complete events into frames
    of up to 200,000 rows (`take_frames`), marks kept when `keep_marks`."""

    def __init__(self, tables: FileTables, log: FileLog, keep_marks: bool = False):
        self.tables = tables
        self.log = log
        self.keep_marks = keep_marks
        self._frames: list[pl.DataFrame] = []
        self.marks: list[dict] = []
        self.objects = 0  # records that are trace events of any kind
        self.first_bad: bytes | None = None  # the first line or record that is none
        self._rows: list[dict] = []
        self._open: dict[tuple, list[dict]] = {}  # (pid, tid) -> open B events

    def add_lines(self, lines: Iterable[bytes]) -> None:
        loads = orjson.loads
        bad = 0
        for line in lines:
            line = line.strip()
            if not line or line in (b"[", b"]", b","):
                continue
            if line[-1:] == b",":
                line = line[:-1]
            try:
                obj = loads(line)
            except orjson.JSONDecodeError:
                obj = None
            if not isinstance(obj, dict):
                bad += 1
                if self.first_bad is None:
                    self.first_bad = line
                continue
            self.add(obj)
        if bad:
            self.log.dropped_lines += bad
            self.log.warn(f"skipped {bad} line(s) that are not JSON objects")
        self.flush()

    def add_all(self, events: Iterable) -> None:
        for e in events:
            if isinstance(e, dict):
                self.add(e)
        self.flush()

    def add(self, e: dict) -> None:
        ph = phase_of(e.get("ph"))
        if ph is None and "name" not in e:
            if self.first_bad is None:
                self.first_bad = orjson.dumps(e)
            return
        self.objects += 1
        args = e.get("args")
        if not isinstance(args, dict):
            args = {}
        if ph == "X":
            self._complete(e, args)
        elif ph == "M":
            self.tables.add_metadata(e, args)
            if self.keep_marks and e.get("name") not in ("HH", "FH", "SH", "OH", "KS", "process_name", "thread_name"):
                self.marks.append({**e, "ph": "M"})
        elif ph in ("B", "E"):
            self._begin_end(e, ph, args)
        elif ph == "C" and e.get("cat") == MEMORY_CAT:  # memory samples: rows, with no duration
            self._complete({**e, "dur": 0}, args)
        elif ph in MARK_PHASES:
            if self.keep_marks:
                self.marks.append({**e, "ph": ph})
        else:
            self.log.skipped_events += 1  # flows, async, objects, aggregated records: no events

    def _begin_end(self, e: dict, ph: str, args: dict) -> None:
        stack = self._open.setdefault((e.get("pid"), e.get("tid")), [])
        if ph == "B":
            stack.append(e)
            return
        if not stack:
            self.log.unpaired += 1
            return
        begin = stack.pop()
        bargs = begin.get("args")
        if not isinstance(bargs, dict):
            bargs = {}
        merged = {**begin, "args": {**bargs, **args}}
        try:
            merged["dur"] = float(e["ts"]) - float(begin["ts"])
        except (KeyError, TypeError, ValueError):
            self.log.unpaired += 1
            return
        self._complete(merged, merged["args"])

    def _complete(self, e: dict, args: dict) -> None:
        row = {k: v for k, v in e.items() if k not in ("args", "ph")}
        for k, v in args.items():
            row[f"arg_{k}" if k in TOP_KEYS or k == "trace_file" else k] = v
        self.log.saw(e, args)
        if e.get("cat") == "dftracer":
            if e.get("name") == "start":
                self.tables.add_process_facts(e, args)
            elif e.get("name") == "end" and isinstance(args.get("dropped"), int):
                self.log.dropped_events += args["dropped"]
        self._rows.append(row)
        if len(self._rows) >= _ROWS_PER_FRAME:
            self.flush()

    def flush(self) -> None:
        if self._rows:
            self._frames.append(rows_to_frame(self._rows))
            self._rows = []

    def take_frames(self) -> list[pl.DataFrame]:
        """The rows read since the last call, as frames."""
        self.flush()
        frames, self._frames = self._frames, []
        return frames

    def close(self) -> None:
        """The end of the file: B events still open are unpaired."""
        self.flush()
        for key, stack in self._open.items():
            if stack:
                self.log.unpaired += len(stack)
                self.log.warn(f"{len(stack)} 'B' event(s) without a matching 'E' on pid/tid {key}; skipped")
        self._open.clear()


def rows_to_frame(rows: list[dict]) -> pl.DataFrame:
    keys: dict[str, None] = {}
    for r in rows:
        for k in r:
            keys.setdefault(k, None)
    return dict_columns_frame({k: [r.get(k) for r in rows] for k in keys})
