"""Chrome-trace JSON for Perfetto and chrome://tracing, streamed.

    stats = convert(["run/trace-71.pfw.gz"], "run/trace.json")

What the output guarantees:

- `{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}`, valid JSON, one event a line;
- string `ph`, integer microsecond `ts` and `dur`;
- complete (`X`) events properly nested on every thread: a child that pokes out of its parent is
  clipped to the parent's end (counted in `otherData.clipped`), so no viewer shows partial overlaps;
- one track per process and per thread, named by `process_name` / `thread_name` metadata
  (from the trace's own records, else from its `start` record: command, host, rank);
- phases and compile events distinguishable: `cat` carries the phase (`dynamo,forward`,
  `dynamo.graph,backward`, `dynamo.compile`) and `cname` colours them in chrome://tracing;
- each slice's args resolved from its `OH` record: layer, module type, `source` (file:line), code,
  target, node, graph, compile id, phase, shapes where recorded, plus the event's own args
  (epoch, step, ...). Bookkeeping args (`hhash`, `p_idx`, `level`, `op`) are dropped.

Memory: events are held as packed integer arrays (about 40 bytes each) with their strings and
static args interned, never as Python dicts; the output is written line by line. Inputs: dynascope /
pydftracer `.pfw` and `.pfw.gz` (any layout: leading `[` or not, string or integer `ph`), and
Chrome-trace `.json` / `.json.gz` (a `traceEvents` object or a bare array; loaded whole).
"""

from __future__ import annotations

import glob
import gzip
import io
import os
import zlib
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

import orjson
import polars as pl

from ..errors import DynascopeError, TraceFormatError

__all__ = ["convert", "ConvertStats", "expand_inputs", "is_trace_name", "TRACE_SUFFIXES"]

TRACE_SUFFIXES = (".pfw", ".pfw.gz", ".json", ".json.gz", ".jsonl", ".jsonl.gz")
CONVERTED_SUFFIXES = (".chrome.json", ".chrome.json.gz")  # what `dynascope convert` writes by default
_INT_PH = {1: "X", 2: "C", 3: "X", 4: "M"}
_BOOKKEEPING = {"hhash", "p_idx", "level", "op", "id"}
_OP_ARG_KEYS = frozenset(_BOOKKEEPING | {"grad_enabled"})
_OH_DROP = {"value", "hash", "graph_op", "index", "hhash", "kind", "file", "line"}
_PASS_PH = {"i", "I", "C", "n", "R"}  # kept as they are (instants, counters, marks)

# chrome://tracing reserved colour names (Perfetto colours by name and ignores cname).
CNAMES = {
    ("op", "forward"): "thread_state_running",  # green
    ("op", "backward"): "rail_response",  # blue
    ("op", "inference"): "thread_state_runnable",  # light blue
    ("graph", "forward"): "good",  # dark green
    ("graph", "backward"): "light_memory_dump",  # dark blue
    ("graph", "inference"): "generic_work",
    ("compile", ""): "rail_animation",  # red
    ("region", ""): "rail_idle",  # orange
}


def _dumps(obj: Any, option: int = 0) -> bytes:
    """orjson.dumps, copied to an exact-size bytes: orjson's own result keeps a 4 KiB buffer, which
    adds up when hundreds of thousands of distinct args are interned."""
    return bytes(memoryview(orjson.dumps(obj, option=option)))


class ConvertError(DynascopeError):
    """The inputs cannot be converted (none found, unwritable output)."""


@dataclass
class ConvertStats:
    out: Path
    files: list[str] = field(default_factory=list)
    events: int = 0  # complete events written
    passed: int = 0  # other events written as they were (instants, counters)
    clipped: int = 0  # children clipped to their parent's end
    unsupported: int = 0  # events of phases not converted (B/E pairs, flows, ...)
    bad_lines: int = 0  # lines that were not JSON
    truncated: list[str] = field(default_factory=list)  # files whose gzip stream was cut short
    processes: int = 0
    threads: int = 0

    @property
    def warnings(self) -> list[str]:
        out = []
        if self.bad_lines:
            out.append(f"skipped {self.bad_lines} line(s) that were not JSON records")
        for f in self.truncated:
            out.append(f"{f}: gzip stream cut short; read up to the last whole member")
        if self.unsupported:
            out.append(f"skipped {self.unsupported} event(s) of phases not converted (B/E, flows)")
        return out


# ------------------------------------------------------------------------------------------ inputs


def expand_inputs(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Files from paths, directories (their trace files) and globs; a missing one is an error."""
    out: list[Path] = []
    for raw in paths:
        text = str(raw)
        p = Path(text)
        if p.is_dir():
            found = sorted(q for q in p.rglob("*") if q.is_file() and is_trace_name(q.name))
            if not found:
                raise TraceFormatError(f"{p}: no trace files (*.pfw, *.pfw.gz, *.json) in this directory; give a trace file or a directory holding some")
            out.extend(found)
        elif p.is_file():
            out.append(p)
        elif any(c in text for c in "*?["):
            found = sorted(Path(q) for q in glob.glob(text) if Path(q).is_file())
            if not found:
                raise TraceFormatError(f"{text}: the pattern matches no files")
            out.extend(found)
        else:
            raise TraceFormatError(f"{text}: no such file or directory; give a .pfw/.pfw.gz/.json trace or a directory of them")
    return out


def is_trace_name(name: str) -> bool:
    """Whether a file found in a directory is a trace: not explanation.json, not our own converted output."""
    return name.endswith(TRACE_SUFFIXES) and name != "explanation.json" and not name.endswith(CONVERTED_SUFFIXES)


def _open_bytes(path: Path) -> IO[bytes]:
    with open(path, "rb") as fh:
        magic = fh.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rb")
    return open(path, "rb")


def _iter_lines(path: Path, stats: ConvertStats) -> Iterator[bytes]:
    """Lines of a (possibly multi-member, possibly truncated) gzip or plain file."""
    fh = _open_bytes(path)
    try:
        for line in fh:
            yield line
    except (EOFError, gzip.BadGzipFile, zlib.error, OSError):
        stats.truncated.append(str(path))
    finally:
        fh.close()


def _records(path: Path, stats: ConvertStats) -> Iterator[dict]:
    name = path.name.lower()
    if name.endswith((".json", ".json.gz")):
        yield from _whole_json_records(path, stats)
        return
    first = True
    for line in _iter_lines(path, stats):
        line = line.strip()
        if first:
            first = False
            if line.startswith(b"{\"traceEvents\"") or (line.startswith(b"{") and not line.endswith((b"}", b"},"))):
                yield from _whole_json_records(path, stats)
                return
        if not line or line in (b"[", b"]", b"],", b"{", b"}"):
            continue
        if line.endswith(b","):
            line = line[:-1]
        if line.startswith(b"["):
            line = line[1:]
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            stats.bad_lines += 1
            continue
        if isinstance(rec, dict):
            yield rec
        else:
            stats.bad_lines += 1


def _whole_json_records(path: Path, stats: ConvertStats) -> Iterator[dict]:
    fh = _open_bytes(path)
    try:
        data = fh.read()
    except (EOFError, gzip.BadGzipFile, zlib.error, OSError):
        stats.truncated.append(str(path))
        data = b""
    finally:
        fh.close()
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise TraceFormatError(
            f"{path}: not a Chrome-trace JSON file ({exc}); expected a traceEvents object, a JSON array, or dynascope's one-record-a-line .pfw"
        ) from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise TraceFormatError(f"{path}: JSON without a traceEvents list; expected Chrome-trace JSON")
    for rec in events:
        if isinstance(rec, dict):
            yield rec


# ------------------------------------------------------------------------------------------ intern


class _Interner:
    def __init__(self) -> None:
        self.index: dict[Any, int] = {}
        self.items: list[Any] = []

    def __call__(self, key: Any) -> int:
        i = self.index.get(key)
        if i is None:
            i = self.index[key] = len(self.items)
            self.items.append(key)
        return i


_ARG_ORDER = ("layer", "module_type", "source", "code", "target", "node", "op_type", "phase", "graph", "compile_id", "backend")


def _clean_oh(args: dict) -> dict:
    """OH fields as slice args, most useful first: layer, module type, source line, code, target..."""
    rest = {k: v for k, v in args.items() if k not in _OH_DROP and v not in (None, "")}
    out = {k: rest.pop(k) for k in _ARG_ORDER if k in rest and k != "source"}
    file, line = args.get("file"), args.get("line")
    if file:
        out["source"] = f"{file}:{line}" if line not in (None, "") else str(file)
        if "code" in out:  # keep source before code
            out["code"] = out.pop("code")
    out.update(rest)
    return out


def _kind_of(cat: str, name: str, fields: dict) -> tuple[str, str]:
    """(kind, phase): op / graph / compile / region / other."""
    phase = str(fields.get("phase") or "")
    c = cat.split(",")[0]
    if c == "dynamo.compile":
        return "compile", ""
    if c == "dynamo.graph" or fields.get("kind") == "graph":
        return "graph", phase
    if c == "dynamo":
        return "op", phase
    if c in ("region", "dynascope.region", "dft_fn") or c.endswith(".region"):
        return "region", ""
    return "other", phase


# ----------------------------------------------------------------------------------------- convert


def convert(paths: Iterable[str | os.PathLike], out: str | os.PathLike, compress: bool | None = None) -> ConvertStats:
    """Convert trace files to one Chrome-trace JSON file (gzip when `out` ends in .gz or `compress`)."""
    files = expand_inputs(paths)
    if not files:
        raise ConvertError("no trace files given; name one or more .pfw/.pfw.gz/.json files or a directory")
    out = Path(out)
    stats = ConvertStats(out=out, files=[str(f) for f in files])

    threads = _Interner()  # (pid, tid)
    strings = _Interner()  # names and cats
    argsets = _Interner()  # orjson bytes of resolved args
    argsets(b"{}")
    kinds = _Interner()  # (kind, phase)
    col_thread, col_name, col_cat, col_args, col_kind = (array("i") for _ in range(5))
    col_ts, col_dur = array("q"), array("q")
    process_names: dict[Any, str] = {}
    process_start: dict[Any, dict] = {}
    thread_names: dict[tuple, str] = {}
    passthrough: list[dict] = []
    args_cache: dict[tuple, tuple[int, int]] = {}
    thread_index, string_index = threads.index, strings.index

    for path in files:
        ops: dict[str, dict] = {}  # OH value (or hash) → fields (per file: references are per process)
        op_at: dict[tuple[str, int], str] = {}  # (graph OH value, k) → OH value of the graph's op k
        graph_of_call: dict[int, str] = {}  # id of a dynamo.graph event → its graph OH value
        pend_pos, pend_parent, pend_k = array("q"), array("q"), array("i")  # op events to attribute later
        pend_grad = array("b")
        strings_h: dict[str, str] = {}  # SH/FH/HH hash → string

        def _resolve(cat: str, name: str, op_key: str | None, extra: dict) -> tuple[int, int]:
            fields = ops.get(op_key) if op_key is not None else None
            if fields is None and ("layer" in extra or "phase" in extra or "kind" in extra):
                fields, extra = extra, {}  # inline attribution (DYNASCOPE_INLINE_ARGS=1)
            merged = _clean_oh(fields) if fields else {}
            merged.update(extra)
            for k in ("fhash", "cwd", "cmd_hash", "exec_hash"):
                v = merged.get(k)
                if isinstance(v, str) and v in strings_h:
                    merged[k] = strings_h[v]
            try:
                blob = _dumps(merged, orjson.OPT_NON_STR_KEYS)
            except TypeError:
                blob = _dumps({str(k): str(v) for k, v in merged.items()})
            return argsets(blob), kinds(_kind_of(cat, name, fields or {}))

        bad_before, n_records = stats.bad_lines, 0
        for rec in _records(path, stats):
            n_records += 1
            ph = rec.get("ph")
            if isinstance(ph, int):
                ph = _INT_PH.get(ph, str(ph))
            name = rec.get("name")
            name = "" if name is None else str(name)
            args = rec.get("args") if isinstance(rec.get("args"), dict) else {}
            pid, tid = rec.get("pid", 0), rec.get("tid", 0)
            if ph == "M":
                if name == "OH":
                    value = args.get("value")
                    if value is not None:
                        ops[str(value)] = args
                        if args.get("hash") is not None:
                            ops[str(args["hash"])] = args
                        if args.get("graph_op") is not None and isinstance(args.get("index"), int):
                            op_at[(str(args["graph_op"]), args["index"])] = str(value)
                elif name in ("HH", "FH", "SH"):
                    if args.get("value") is not None:
                        strings_h[str(args["value"])] = str(args.get("name", ""))
                elif name == "thread_name":
                    thread_names[(pid, tid)] = str(args.get("name", tid))
                elif name == "process_name":
                    process_names[pid] = str(args.get("name", pid))
                else:
                    passthrough.append({**rec, "ph": ph})  # pydftracer's integer ph made a string
                continue
            if ph != "X":
                if ph in _PASS_PH:
                    passthrough.append({**rec, "ph": ph})
                else:
                    stats.unsupported += 1
                continue
            cat = rec.get("cat")
            cat = "" if cat is None else str(cat)
            if cat == "dftracer" and name in ("start", "end"):
                if name == "start":
                    process_start[pid] = {**args, "_cmd": strings_h.get(str(args.get("cmd_hash", "")), "")}
                continue
            ts, dur = rec.get("ts", 0), rec.get("dur", 0) or 0
            if type(ts) is not int or type(dur) is not int:  # Chrome-trace JSON: float µs
                try:
                    ts_f, dur_f = float(ts), float(dur)
                except (TypeError, ValueError):
                    stats.bad_lines += 1
                    continue
                ts = round(ts_f)
                dur = round(ts_f + dur_f) - ts
            if dur < 0:
                dur = 0
            op_key = args.get("op")
            if op_key is not None:
                op_key = str(op_key)
            if args.keys() <= _OP_ARG_KEYS:  # the common case: an op or graph event, nothing of its own
                grad = args.get("grad_enabled")
                extra = {"grad_enabled": grad} if grad is not None else {}
                key = (cat, op_key, grad)
                eid, parent = rec.get("id"), args.get("p_idx")
                if type(eid) is int:
                    if cat == "dynamo.graph" and op_key is not None:
                        graph_of_call[eid] = op_key
                    elif op_key is None and cat == "dynamo" and type(parent) is int and parent >= 0:
                        # no reference: op k of a graph call has id = p_idx + 1 + k (resolved after the file)
                        pend_pos.append(len(col_ts))
                        pend_parent.append(parent)
                        pend_k.append(eid - parent - 1)
                        pend_grad.append(grad if grad in (0, 1) else -1)
            else:
                extra = {k: v for k, v in args.items() if k not in _BOOKKEEPING}
                extra_blob = _dumps(extra, orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS) if extra else b""
                key = (cat, op_key, extra_blob)
            cached = args_cache.get(key)
            if cached is None:
                cached = args_cache[key] = _resolve(cat, name, op_key, extra)
            aid, kid = cached
            t = thread_index.get((pid, tid))
            col_thread.append(t if t is not None else threads((pid, tid)))
            n_id = string_index.get(name)
            col_name.append(n_id if n_id is not None else strings(name))
            c_id = string_index.get(cat)
            col_cat.append(c_id if c_id is not None else strings(cat))
            col_args.append(aid)
            col_kind.append(kid)
            col_ts.append(ts)
            col_dur.append(dur)
        if n_records == 0 and stats.bad_lines > bad_before:
            raise TraceFormatError(
                f"{path}: not a trace: no line is a JSON record; expected DFTracer JSON lines (.pfw/.pfw.gz) or Chrome-trace JSON"
            )
        dynamo_cat = "dynamo"
        for pos, parent, k, grad in zip(pend_pos, pend_parent, pend_k, pend_grad):
            graph_ref = graph_of_call.get(parent)
            op_ref = op_at.get((graph_ref, k)) if graph_ref is not None else None
            if op_ref is None:
                continue
            g = None if grad < 0 else grad
            key = (dynamo_cat, op_ref, g)
            cached = args_cache.get(key)
            if cached is None:
                cached = args_cache[key] = _resolve(dynamo_cat, "", op_ref, {"grad_enabled": g} if g is not None else {})
            col_args[pos], col_kind[pos] = cached
        args_cache.clear()  # op references are per file

    stats.threads = len(threads.items)
    stats.processes = len({p for p, _ in threads.items} | set(process_names))
    _write(out, compress, stats, threads, strings, argsets, kinds, col_thread, col_name, col_cat, col_args, col_kind,
           col_ts, col_dur, process_names, process_start, thread_names, passthrough)
    return stats


def _process_label(pid: Any, names: dict, starts: dict) -> str:
    if pid in names:
        return names[pid]
    start = starts.get(pid) or {}
    label = start.get("_cmd") or f"process {pid}"
    label = str(label).replace(";", " ")
    if len(label) > 80:
        label = label[:77] + "..."
    rank = start.get("rank")
    if isinstance(rank, int) and rank >= 0:
        label += f" [rank {rank}]"
    host = start.get("host")
    if host:
        label += f" @{host}"
    return label


def _write(out, compress, stats, threads, strings, argsets, kinds, c_thread, c_name, c_cat, c_args, c_kind, c_ts, c_dur,
           process_names, process_start, thread_names, passthrough) -> None:
    if compress is None:
        compress = out.name.endswith(".gz")
    try:
        if out.parent and not out.parent.exists():
            out.parent.mkdir(parents=True, exist_ok=True)
        raw = gzip.open(out, "wb", compresslevel=3) if compress else open(out, "wb")
    except OSError as exc:
        raise ConvertError(f"cannot write {out}: {exc.strerror or exc}; choose another -o path") from None
    fh = io.BufferedWriter(raw, buffer_size=1 << 20) if not compress else raw
    try:
        fh.write(b'{"traceEvents":[\n')
        first = True

        def emit(blob: bytes) -> None:
            nonlocal first
            if not first:
                fh.write(b",\n")
            first = False
            fh.write(blob)

        # Track metadata: one process track per pid, one thread track per (pid, tid), sorted by rank.
        pids: list[Any] = []
        for pid, _ in threads.items:
            if pid not in pids:
                pids.append(pid)
        for pid in process_names:
            if pid not in pids:
                pids.append(pid)

        def sort_key(pid: Any) -> tuple:
            rank = (process_start.get(pid) or {}).get("rank")
            return (rank if isinstance(rank, int) and rank >= 0 else 1 << 30, str(pid))

        for order, pid in enumerate(sorted(pids, key=sort_key)):
            emit(orjson.dumps({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": _process_label(pid, process_names, process_start)}}))
            emit(orjson.dumps({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": order}}))
            start = process_start.get(pid)
            if start:
                labels = [f"{k}={start[k]}" for k in ("host", "rank", "world_size") if start.get(k) not in (None, "", -1)]
                if labels:
                    emit(orjson.dumps({"name": "process_labels", "ph": "M", "pid": pid, "tid": 0, "args": {"labels": ", ".join(labels)}}))
        for pid, tid in threads.items:
            tname = thread_names.get((pid, tid)) or f"thread {tid}"
            emit(orjson.dumps({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": tname}}))
        for rec in passthrough:
            emit(orjson.dumps(rec, option=orjson.OPT_NON_STR_KEYS))

        n = len(c_ts)
        if n:
            frame = pl.DataFrame(
                {
                    "t": pl.Series(c_thread, dtype=pl.Int32),
                    "ts": pl.Series(c_ts, dtype=pl.Int64),
                    "dur": pl.Series(c_dur, dtype=pl.Int64),
                    "n": pl.Series(c_name, dtype=pl.Int32),
                    "c": pl.Series(c_cat, dtype=pl.Int32),
                    "a": pl.Series(c_args, dtype=pl.Int32),
                    "k": pl.Series(c_kind, dtype=pl.Int32),
                }
            )
            for col in (c_thread, c_ts, c_dur, c_name, c_cat, c_args, c_kind):
                del col[:]  # the frame holds the events now: free the arrays before sorting
            frame = frame.sort(["t", "ts", "dur"], descending=[False, False, True])
            name_json = [orjson.dumps(s) for s in strings.items]
            thread_head = [
                b',"pid":' + orjson.dumps(pid) + b',"tid":' + orjson.dumps(tid) for pid, tid in threads.items
            ]
            kind_info = []
            for kind, phase in kinds.items:
                cname = CNAMES.get((kind, phase if kind in ("op", "graph") else ""))
                kind_info.append((kind, phase, b',"cname":' + orjson.dumps(cname) if cname else b""))
            cat_cache: dict[tuple[int, int], bytes] = {}
            stack: list[int] = []
            cur_thread = -1
            written = clipped = 0
            chunk = 20_000
            for offset in range(0, n, chunk):
                part = frame.slice(offset, chunk)
                lines: list[bytes] = []
                for t, ts, dur, nm, ct, a, k in zip(*(part.get_column(c).to_list() for c in ("t", "ts", "dur", "n", "c", "a", "k"))):
                    if t != cur_thread:
                        cur_thread = t
                        stack.clear()
                    while stack and stack[-1] <= ts:
                        stack.pop()
                    end = ts + dur
                    if stack and end > stack[-1]:
                        end = stack[-1]
                        dur = end - ts
                        clipped += 1
                    stack.append(end)
                    cat = cat_cache.get((ct, k))
                    if cat is None:
                        kind, phase, cname = kind_info[k]
                        base = strings.items[ct]
                        full = f"{base},{phase}" if phase and kind in ("op", "graph") else base
                        cat = cat_cache[(ct, k)] = b',"cat":' + orjson.dumps(full) + cname
                    lines.append(
                        b'{"name":' + name_json[nm] + cat + b',"ph":"X","ts":' + str(ts).encode() + b',"dur":'
                        + str(dur).encode() + thread_head[t] + b',"args":' + argsets.items[a] + b"}"
                    )
                written += len(lines)
                if lines:
                    if first:
                        fh.write(lines[0])
                        first = False
                        lines = lines[1:]
                    if lines:
                        fh.write(b",\n" + b",\n".join(lines))
            stats.events = written
            stats.clipped = clipped
        stats.passed = len(passthrough)
        other = {
            "generator": "dynascope",
            "source_files": stats.files,
            "clipped": stats.clipped,
            "skipped_lines": stats.bad_lines,
            "unsupported_events": stats.unsupported,
            "truncated_files": stats.truncated,
        }
        fh.write(b'\n],"displayTimeUnit":"ms","otherData":' + orjson.dumps(other) + b"}\n")
    finally:
        fh.close()
