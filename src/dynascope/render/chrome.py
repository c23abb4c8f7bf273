"""Chrome-trace JSON for Perfetto and chrome://tracing, from what the reader yields.

    stats = convert(["run/trace-71.pfw.gz"], "run/trace.json")

Reading (paths, gzip, layouts, B/E pairs, integer `ph`, hashes and OH attribution) is the analysis
reader's job (`dynascope.analyze.reader.read_trace_with_info`); this module keeps only what is Chrome's.
Every row `read_trace` returns is in the output: complete events as `X` slices, the DFTracer `start` and
`end` records as process-wide instants; the input's instants, counters and other metadata pass through.

What the output guarantees:

- `{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}`, valid JSON, one event a line;
- string `ph`, integer microsecond `ts` and `dur`;
- complete (`X`) events properly nested on every thread: a child that pokes out of its parent is
  clipped to the parent's end (counted in `otherData.clipped`), so no viewer shows partial overlaps;
- one track per process and per thread, named by `process_name` / `thread_name` metadata
  (from the trace's own records, else from its `start` record: command, host, rank);
- phases and compile events distinguishable: `cat` carries the phase (`dynamo,forward`,
  `dynamo.graph,backward`, `dynamo.compile`) and `cname` colours them in chrome://tracing;
- each slice's args: its resolved attribution (layer, module type, `source` as file:line, code,
  target, node, graph, compile id, phase, shapes where recorded) and its own args (epoch, step, ...);
  bookkeeping (`hhash`, `p_idx`, `level`, `op`, ids, the process's rank and host) is left out.
"""

from __future__ import annotations

import gzip
import io
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Iterable

import orjson
import polars as pl

from ..analyze.paths import expand_paths
from ..analyze.readinfo import ReadInfo
from ..analyze.reader import read_trace_with_info
from ..errors import DynascopeError

__all__ = ["CNAMES", "ConvertError", "ConvertStats", "convert"]

# columns that are no slice args: the event's identity, bookkeeping, the process's facts (on its track),
# attribution plumbing; `file` and `line` become `source`
_NOT_ARGS = frozenset({
    "trace_file", "name", "cat", "pid", "tid", "id", "ts", "dur", "type", "hhash", "p_idx", "level", "op",
    "host", "rank", "world_size", "local_rank", "process_name", "value", "hash", "graph_op", "index", "kind",
    "file", "line", "fhash", "cmd_hash", "exec_hash",
})  # fmt: skip
_ARG_ORDER = ("layer", "module_type", "source", "code", "target", "node", "op_type", "phase", "graph", "compile_id", "backend")
_MARKERS = ("start", "end")  # DFTracer's process records: instants on the process track
_ROWS_PER_WRITE = 20_000

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


class ConvertError(DynascopeError):
    """The inputs cannot be converted (none found, unwritable output)."""


@dataclass
class ConvertStats:
    out: Path
    files: list[str] = field(default_factory=list)
    events: int = 0  # complete events written
    markers: int = 0  # start/end records written as instants
    passed: int = 0  # other records written as they were (instants, counters, metadata)
    clipped: int = 0  # children clipped to their parent's end
    unsupported: int = 0  # records of no event: unpaired B/E, flows, async and object records
    bad_lines: int = 0  # lines that were not JSON
    truncated: list[str] = field(default_factory=list)  # files whose gzip stream was cut short
    processes: int = 0
    threads: int = 0
    warnings: list[str] = field(default_factory=list)  # what reading skipped, as `dynascope report` says it


# ------------------------------------------------------------------------------------------ convert


def convert(paths: Iterable[str | os.PathLike], out: str | os.PathLike, compress: bool | None = None) -> ConvertStats:
    """Convert trace files to one Chrome-trace JSON file (gzip when `out` ends in .gz or `compress`)."""
    files = expand_paths(list(paths))
    if not files:
        raise ConvertError("no trace files given; name one or more .pfw/.pfw.gz/.json files or a directory")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # they come back in the stats, for the command to print once
        frame, info = read_trace_with_info(files, keep_marks=True)
    out = Path(out)
    stats = _stats(out, files, info)
    frame = _with_threads(frame)
    tracks = _Tracks.of(frame, info)
    stats.threads, stats.processes = tracks.thread_count, len(tracks.pids)
    is_marker = (pl.col("cat").cast(pl.String) == "dftracer") & pl.col("name").cast(pl.String).is_in(_MARKERS)
    slices, markers = frame.filter(~is_marker), frame.filter(is_marker)
    with _open_output(out, compress) as fh:
        writer = _EventWriter(fh)
        writer.write_all(tracks.records())
        writer.write_all(_marker_records(markers))
        writer.write_all(orjson.dumps(m, option=orjson.OPT_NON_STR_KEYS) for m in info.marks)
        stats.events, stats.clipped = _write_slices(writer, slices)
        stats.markers, stats.passed = markers.height, len(info.marks)
        writer.close(_other_data(stats))
    return stats


def _stats(out: Path, files: list[Path], info: ReadInfo) -> ConvertStats:
    notes = list(info.warnings)
    if info.skipped_events:
        notes.append(f"skipped {info.skipped_events} record(s) of phases that are no events (flows, async, objects)")
    return ConvertStats(
        out=out,
        files=[str(f) for f in files],
        unsupported=info.unpaired + info.skipped_events,
        bad_lines=info.dropped_lines,
        truncated=list(info.truncated),
        warnings=notes,
    )


def _other_data(stats: ConvertStats) -> dict:
    return {
        "generator": "dynascope",
        "source_files": stats.files,
        "clipped": stats.clipped,
        "skipped_lines": stats.bad_lines,
        "unsupported_events": stats.unsupported,
        "truncated_files": stats.truncated,
    }


def _with_threads(frame: pl.DataFrame) -> pl.DataFrame:
    """pid and tid as given (0 where missing), name and cat (null where missing), and `__t`, the
    thread's track number."""
    frame = frame.with_columns(
        [(pl.col(c) if c in frame.columns else pl.lit(None, dtype=pl.Int64)).fill_null(0).alias(c) for c in ("pid", "tid")]
        + [pl.lit(None, dtype=pl.String).alias(c) for c in ("name", "cat") if c not in frame.columns]
    )
    threads = frame.select("pid", "tid").unique(maintain_order=True).with_row_index("__t")
    return frame.join(threads, on=["pid", "tid"], how="left", maintain_order="left")


# ------------------------------------------------------------------------------------------ tracks


@dataclass
class _Tracks:
    """Process and thread tracks: names, labels and order (by rank)."""

    pids: list[Any]
    threads: list[tuple[Any, Any]]
    process_names: dict[Any, str]
    starts: dict[Any, dict]  # pid -> its start record's row
    thread_names: dict[tuple, str]

    @property
    def thread_count(self) -> int:
        return len(self.threads)

    @classmethod
    def of(cls, frame: pl.DataFrame, info: ReadInfo) -> _Tracks:
        threads = frame.select("pid", "tid").unique(maintain_order=True).rows()
        pids = list(dict.fromkeys(p for p, _ in threads))
        names = {}
        if "process_name" in frame.columns:
            named = frame.select("pid", "process_name").drop_nulls().unique(subset="pid", keep="first", maintain_order=True)
            names = dict(named.rows())
        is_start = (pl.col("cat").cast(pl.String) == "dftracer") & (pl.col("name").cast(pl.String) == "start")
        starts = {row["pid"]: row for row in frame.filter(is_start).iter_rows(named=True)}
        return cls(pids, threads, names, starts, info.thread_names)

    def _rank(self, pid: Any) -> int | None:
        rank = self.starts.get(pid, {}).get("rank")
        return rank if isinstance(rank, int) and rank >= 0 else None

    def _label(self, pid: Any) -> str:
        if pid in self.process_names:
            return self.process_names[pid]
        start = self.starts.get(pid) or {}
        cmd = start.get("cmd") if start.get("cmd") != start.get("cmd_hash") else None
        label = str(cmd or f"process {pid}").replace(";", " ")
        if len(label) > 80:
            label = label[:77] + "..."
        if self._rank(pid) is not None:
            label += f" [rank {self._rank(pid)}]"
        if start.get("host"):
            label += f" @{start['host']}"
        return label

    def records(self) -> Iterable[bytes]:
        order = sorted(self.pids, key=lambda p: (self._rank(p) if self._rank(p) is not None else 1 << 30, str(p)))
        for index, pid in enumerate(order):
            yield _meta("process_name", pid, 0, {"name": self._label(pid)})
            yield _meta("process_sort_index", pid, 0, {"sort_index": index})
            start = self.starts.get(pid) or {}
            labels = [f"{k}={start[k]}" for k in ("host", "rank", "world_size") if start.get(k) not in (None, "", -1)]
            if labels:
                yield _meta("process_labels", pid, 0, {"labels": ", ".join(labels)})
        for pid, tid in self.threads:
            yield _meta("thread_name", pid, tid, {"name": self.thread_names.get((pid, tid)) or f"thread {tid}"})


def _meta(name: str, pid: Any, tid: Any, args: dict) -> bytes:
    return orjson.dumps({"name": name, "ph": "M", "pid": pid, "tid": tid, "args": args})


# ------------------------------------------------------------------------------------------ events


def _kind_of(cat: str, phase: str, kind: str) -> tuple[str, str]:
    """(kind, phase): op / graph / compile / region / other."""
    c = cat.split(",")[0]
    if c == "dynamo.compile":
        return "compile", ""
    if c == "dynamo.graph" or kind == "graph":
        return "graph", phase
    if c == "dynamo":
        return "op", phase
    if c in ("region", "dynascope.region", "dft_fn") or c.endswith(".region"):
        return "region", ""
    return "other", phase


def _args_of(row: dict, arg_cols: list[str]) -> dict:
    """A row's slice args: attribution first (most useful first), then its own args; empty values left out."""
    present = {k: row[k] for k in arg_cols if row.get(k) not in (None, "")}
    if row.get("file"):
        line = row.get("line")
        present["source"] = f"{row['file']}:{line}" if line not in (None, "") else str(row["file"])
    ordered = {k: present.pop(k) for k in _ARG_ORDER if k in present}
    ordered.update(present)
    return ordered


def _cat_field(row: dict) -> bytes:
    """`,"cat":...` (with the phase for ops and graph calls) and its chrome://tracing colour."""
    cat = str(row.get("cat") or "")
    kind, phase = _kind_of(cat, str(row.get("phase") or ""), str(row.get("kind") or ""))
    full = f"{cat},{phase}" if phase and kind in ("op", "graph") else cat
    cname = CNAMES.get((kind, phase if kind in ("op", "graph") else ""))
    return b',"cat":' + orjson.dumps(full) + (b',"cname":' + orjson.dumps(cname) if cname else b"")


def _dumps_args(args: dict) -> bytes:
    try:
        return orjson.dumps(args, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return orjson.dumps({str(k): str(v) for k, v in args.items()})


def _static_parts(frame: pl.DataFrame) -> tuple[pl.DataFrame, list[tuple[bytes, bytes]]]:
    """Each row's `__s`: the number of its (cat, args) combination, and each combination's cat field and
    args JSON, computed once per combination (op events share a handful)."""
    arg_cols = [c for c in frame.columns if c not in _NOT_ARGS and not c.startswith("__")]
    keys = [c for c in ["cat", "kind", "file", "line", *arg_cols] if c in frame.columns]
    combos = frame.select(keys).unique(maintain_order=True).with_row_index("__s")
    parts = [(_cat_field(row), _dumps_args(_args_of(row, arg_cols))) for row in combos.drop("__s").iter_rows(named=True)]
    frame = frame.join(combos, on=keys, how="left", nulls_equal=True, maintain_order="left")
    return frame, parts


def _marker_records(markers: pl.DataFrame) -> Iterable[bytes]:
    if markers.height == 0:
        return
    markers, parts = _static_parts(markers)
    for row in markers.select("name", "pid", "tid", "ts", "__s").iter_rows():
        name, pid, tid, ts, s = row
        cat, args = parts[s]
        yield (
            b'{"name":' + orjson.dumps(name) + cat + b',"ph":"i","s":"p","ts":' + orjson.dumps(ts)
            + b',"pid":' + orjson.dumps(pid) + b',"tid":' + orjson.dumps(tid) + b',"args":' + args + b"}"
        )  # fmt: skip


def _write_slices(writer: _EventWriter, slices: pl.DataFrame) -> tuple[int, int]:
    """Write the complete events, sorted and nested per thread; (events written, children clipped)."""
    if slices.height == 0:
        return 0, 0
    slices, parts = _static_parts(slices)
    slices = slices.select(
        "__t", "pid", "tid", pl.col("ts").fill_null(0), pl.col("dur").fill_null(0).clip(lower_bound=0), pl.col("name").cast(pl.String), "__s"
    ).sort(["__t", "ts", "dur"], descending=[False, False, True])
    names: dict[str | None, bytes] = {}
    heads: dict[int, bytes] = {}
    stack: list[int] = []
    current = -1
    clipped = 0
    for offset in range(0, slices.height, _ROWS_PER_WRITE):
        lines = []
        for t, pid, tid, ts, dur, name, s in slices.slice(offset, _ROWS_PER_WRITE).iter_rows():
            if t != current:
                current = t
                stack.clear()
                heads[t] = b',"pid":' + orjson.dumps(pid) + b',"tid":' + orjson.dumps(tid)
            while stack and stack[-1] <= ts:
                stack.pop()
            end = ts + dur
            if stack and end > stack[-1]:
                end = stack[-1]
                dur = end - ts
                clipped += 1
            stack.append(end)
            name_json = names.get(name) or names.setdefault(name, orjson.dumps(name or ""))
            cat, args = parts[s]
            lines.append(
                b'{"name":' + name_json + cat + b',"ph":"X","ts":' + str(ts).encode() + b',"dur":' + str(dur).encode()
                + heads[t] + b',"args":' + args + b"}"
            )  # fmt: skip
        writer.write_all(lines)
    return slices.height, clipped


# ------------------------------------------------------------------------------------------ output


def _open_output(out: Path, compress: bool | None) -> IO[bytes]:
    if compress is None:
        compress = out.name.endswith(".gz")
    try:
        if out.parent and not out.parent.exists():
            out.parent.mkdir(parents=True, exist_ok=True)
        raw = gzip.open(out, "wb", compresslevel=3) if compress else open(out, "wb")
    except OSError as exc:
        raise ConvertError(f"cannot write {out}: {exc.strerror or exc}; choose another -o path") from None
    return raw if compress else io.BufferedWriter(raw, buffer_size=1 << 20)


class _EventWriter:
    """The traceEvents array, one event a line, and the closing object."""

    def __init__(self, fh: IO[bytes]):
        self.fh = fh
        self.first = True
        fh.write(b'{"traceEvents":[\n')

    def write_all(self, events: Iterable[bytes]) -> None:
        events = list(events)
        if not events:
            return
        if not self.first:
            self.fh.write(b",\n")
        self.first = False
        self.fh.write(b",\n".join(events))

    def close(self, other: dict) -> None:
        self.fh.write(b'\n],"displayTimeUnit":"ms","otherData":' + orjson.dumps(other) + b"}\n")
