"""Chrome-trace JSON for Perfetto and chrome://tracing, from what the reader yields.

    stats = convert(["run/trace-71.pfw.gz"], "run/trace.json")

Reading (paths, gzip, layouts, B/E pairs, integer `ph`, hashes and OH attribution) is the analysis
reader's job (`dynascope.analyze.read.reader.read_trace_with_info`); this module keeps only what is Chrome's.
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
  bookkeeping (`hhash`, `p_idx`, `level`, `op`, ids, the process's rank and host) is left out;
- a flow arrow (`"s"`/`"f"` events sharing an id, name "batch") from each DataLoader worker's
  `dataloader.fetch` to the main process's `dataloader.next` that received that batch: the main process
  is the worker's parent (`ppid` of its `start` record), the key (host, main pid, loader, batch), and each
  next is linked to the latest fetch of its key that began before the next ended;
- one flow per collective (`comm` events, docs/trace-format.md) issued by two or more processes, named by
  the operation, its `pg` and `seq` in the args (a number of its own as id): an instance on each process
  that has it (its complete event, else its issue marker), in rank order: `"s"` on the first, `"t"` on the
  middle ones, `"f"` on the last, so Perfetto links the same all-reduce across ranks; functional
  collectives in compiled graphs likewise, numbered as the analysis numbers them (group `<pg>/functional`),
  through each rank's collective op.
"""

from __future__ import annotations

import gzip
import io
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from dynascope.analyze.comm import functional_collectives
from dynascope.analyze.read.grouped import read_file_grouped
from dynascope.analyze.read.paths import expand_paths
from dynascope.analyze.read.readinfo import ReadInfo
from dynascope.errors import DynascopeError
from dynascope.trace.format import COMPILE_CAT, DATA_CAT, GPU_CAT, GRAPH_CAT

__all__ = ["CNAMES", "ConvertError", "ConvertStats", "convert"]

# columns that are no slice args: the event's identity, bookkeeping, the process's facts (on its track),
# attribution plumbing; `file` and `line` become `source`
_NOT_ARGS = frozenset({
    "trace_file", "name", "cat", "pid", "tid", "id", "ts", "dur", "type", "hhash", "p_idx", "level", "op",
    "host", "rank", "world_size", "local_rank", "process_name", "value", "hash", "graph_op", "index", "kind",
    "file", "line", "fhash", "cmd_hash", "exec_hash", "kernel_code",
})  # fmt: skip
_ARG_ORDER = (
    "layer", "module_type", "source", "code", "target", "kernel_kind", "layers", "lines", "node", "op_type", "phase",
    "graph", "compile_id", "backend",
)
_MARKERS = ("start", "end")  # DFTracer's process records: instants on the process track
_ROWS_PER_WRITE = 20_000
# columns that vary event by event; the rest (attribution, process, args shared by many events) are
# read as groups, resolved and turned into JSON once per group
_SAMPLES = ("rss", "cuda_allocated", "cuda_reserved")  # a memory sample's values: counters, not slices
_PER_EVENT = ("name", "tid", "id", "ts", "dur", "p_idx", "level", "launch", *_SAMPLES)  # launch: a device event's

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
    flows: int = 0  # flow arrows from a worker's batch fetch to the main process's next()
    comm_flows: int = 0  # collectives linked across processes (one flow each)
    warnings: list[str] = field(default_factory=list)  # what reading skipped, as `dynascope report` says it


# ------------------------------------------------------------------------------------------ convert


def convert(paths: Iterable[str | os.PathLike], out: str | os.PathLike, compress: bool | None = None) -> ConvertStats:
    """Convert trace files to one Chrome-trace JSON file (gzip when `out` ends in .gz or `compress`).

    Files are read and written one at a time (a process's events are all in its file), so the memory
    is one file's; the output appears only when every input was read."""
    files = expand_paths(list(paths))
    if not files:
        raise ConvertError("no trace files given; name one or more .pfw/.pfw.gz/.json files or a directory")
    out = Path(out)
    stats = ConvertStats(out=out, files=[str(f) for f in files])
    partial = out.with_name(out.name + ".partial")
    try:
        with _open_output(partial, out.name.endswith(".gz") if compress is None else compress) as fh:
            writer = _EventWriter(fh)
            reads = [_convert_file(path, writer, stats) for path in files]
            info = ReadInfo.merged(r.info for r in reads)
            tracks = _Tracks.of(reads)
            writer.write_all(tracks.records())
            flows = _batch_flows(reads, tracks) + _gpu_flows(reads)
            stats.flows = len(flows) // 2
            writer.write_all(flows)
            comm, stats.comm_flows = _comm_flows(reads, tracks)
            writer.write_all(comm)
            writer.write_all(orjson.dumps(m, option=orjson.OPT_NON_STR_KEYS) for m in info.marks)
            _add_read_findings(stats, info, tracks)
            writer.close(_other_data(stats))
        partial.replace(out)
    finally:
        partial.unlink(missing_ok=True)
    return stats


def _convert_file(path: Path, writer: _EventWriter, stats: ConvertStats) -> _FileRead:
    """Write one file's events; what reading it found, with its tracks."""
    read = read_file_grouped(path, per_event=_PER_EVENT, keep_marks=True)
    groups = _with_identity(read.groups)
    counters = _counter_records(read.events, groups)
    rows = read.events.filter(~_is_sample(read.events))  # the events; the memory samples are counters
    events = _events(rows, groups)
    parts = _parts(groups)
    facts = _FileRead(read.info, *_track_facts(events, groups), *_loader_events(events, groups),
                      launches=_gpu_launches(events, rows, groups),
                      comms=_comm_events(events, rows, groups))  # fmt: skip
    markers = events.filter(pl.col("__marker"))
    writer.write_all(_marker_records(markers, parts))
    writer.write_all(counters)
    stats.markers += len(counters)
    written, clipped = _write_slices(writer, events, parts)
    stats.events += written
    stats.clipped += clipped
    stats.markers += markers.height
    return facts


def _add_read_findings(stats: ConvertStats, info: ReadInfo, tracks: _Tracks) -> None:
    stats.threads, stats.processes = len(tracks.threads), len(tracks.pids)
    stats.passed = len(info.marks)
    stats.unsupported = info.unpaired + info.skipped_events
    stats.bad_lines = info.dropped_lines
    stats.truncated = list(info.truncated)
    stats.warnings = list(info.warnings)
    if info.skipped_events:
        stats.warnings.append(
            f"skipped {info.skipped_events} record(s) of phases that are no events (flows, async, objects)"
        )


def _other_data(stats: ConvertStats) -> dict:
    return {
        "generator": "dynascope",
        "source_files": stats.files,
        "clipped": stats.clipped,
        "skipped_lines": stats.bad_lines,
        "unsupported_events": stats.unsupported,
        "truncated_files": stats.truncated,
        "batch_flows": stats.flows,
        "comm_flows": stats.comm_flows,
    }


def _with_identity(groups: pl.DataFrame) -> pl.DataFrame:
    """pid as given (0 where missing), cat (null where missing)."""
    return groups.with_columns(
        (pl.col("pid") if "pid" in groups.columns else pl.lit(None, dtype=pl.Int64)).fill_null(0).alias("pid"),
        *([] if "cat" in groups.columns else [pl.lit(None, dtype=pl.String).alias("cat")]),
    )


# ------------------------------------------------------------------------------------------ tracks


@dataclass
class _FileRead:
    """What reading one file found, and the facts its process and thread tracks need."""

    info: ReadInfo
    threads: list[tuple[Any, Any]] = field(default_factory=list)
    process_names: dict[Any, str] = field(default_factory=dict)
    starts: dict[Any, dict] = field(default_factory=dict)  # pid -> its start record's row
    fetches: pl.DataFrame | None = None  # the file's dataloader.fetch events (_loader_events)
    nexts: pl.DataFrame | None = None  # the file's dataloader.next events with a batch
    launches: pl.DataFrame | None = None  # the file's device events with their launch (_gpu_launches)
    comms: pl.DataFrame | None = None  # the file's collectives with a sequence number (_comm_events)


def _track_facts(events: pl.DataFrame, groups: pl.DataFrame) -> tuple[list, dict, dict]:
    """(threads in order, pid -> process name, pid -> its start row) of a file's events."""
    threads = events.select("pid", "tid").unique(maintain_order=True).rows()
    names = {}
    if "process_name" in groups.columns:
        named = (
            groups.select("pid", "process_name").drop_nulls().unique(subset="pid", keep="first", maintain_order=True)
        )
        names = dict(named.rows())
    starts: dict[Any, dict[str, Any]] = {}
    for row in events.filter(pl.col("__marker") & (pl.col("name") == "start")).iter_rows(named=True):
        start = groups.row(row["__s"], named=True)
        starts.setdefault(start["pid"], start)
    return threads, names, starts


@dataclass
class _Tracks:
    """Process and thread tracks: names, labels and order (by rank)."""

    pids: list[Any]
    threads: list[tuple[Any, Any]]
    process_names: dict[Any, str]
    starts: dict[Any, dict]  # pid -> its start record's row
    thread_names: dict[tuple, str]

    @classmethod
    def of(cls, reads: list[_FileRead]) -> _Tracks:
        threads = list(dict.fromkeys(t for r in reads for t in r.threads))
        pids = list(dict.fromkeys(p for p, _ in threads))
        names = {p: n for r in reads for p, n in r.process_names.items()}
        starts = {p: row for r in reads for p, row in r.starts.items()}
        thread_names = {k: v for r in reads for k, v in r.info.thread_names.items()}
        return cls(pids, threads, names, starts, thread_names)

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
    c = cat.split(",", maxsplit=1)[0]
    if c == COMPILE_CAT:
        return "compile", ""
    if c == GRAPH_CAT or kind == "graph":
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


def _events(events: pl.DataFrame, groups: pl.DataFrame) -> pl.DataFrame:
    """The narrow table that is written: pid, tid, ts, dur, name, `__s` (the event's group, whose cat
    field and args JSON `_parts` computes once) and `__marker` (a DFTracer start/end record)."""
    group = events.get_column("group")
    cat = groups.get_column("cat").cast(pl.String).gather(group)
    n = events.height
    no_name = pl.Series("name", [None] * n, dtype=pl.String)
    name = events.get_column("name").cast(pl.String) if "name" in events.columns else no_name
    tid = events.get_column("tid") if "tid" in events.columns else pl.Series("tid", [0] * n, dtype=pl.Int64)
    ts = events.get_column("ts") if "ts" in events.columns else pl.Series("ts", [0] * n)
    return pl.DataFrame([
        groups.get_column("pid").gather(group).alias("pid"),
        tid.fill_null(0).alias("tid"),
        ts.fill_null(0).alias("ts"),
        events.get_column("dur").fill_null(0).clip(lower_bound=0).alias("dur"),
        name.alias("name"),
        group.cast(pl.Int64).alias("__s"),
        ((cat == "dftracer") & name.is_in(_MARKERS)).fill_null(False).alias("__marker"),
    ])  # fmt: skip


def _is_sample(events: pl.DataFrame) -> pl.Expr:
    present = [pl.col(c).is_not_null() for c in _SAMPLES if c in events.columns]
    return pl.any_horizontal(present) if present else pl.lit(False)


def _counter_records(events: pl.DataFrame, groups: pl.DataFrame) -> list[bytes]:
    """The memory samples as counters ("ph":"C"): Perfetto draws one track per process and series."""
    samples = events.filter(_is_sample(events))
    if samples.height == 0:
        return []
    pids = groups.get_column("pid").gather(samples.get_column("group"))
    series = [c for c in _SAMPLES if c in samples.columns]
    out = []
    for pid, row in zip(pids.to_list(), samples.select("name", "tid", "ts", *series).iter_rows(), strict=True):
        name, tid, ts, *values = row
        args = {key: value for key, value in zip(series, values, strict=True) if value is not None}
        out.append(orjson.dumps({"name": name or "memory", "ph": "C", "ts": ts, "pid": pid, "tid": tid or 0,
                                 "args": args}))  # fmt: skip
    return out


def _parts(groups: pl.DataFrame) -> list[tuple[bytes, bytes]]:
    """Per group: its cat field and its args JSON."""
    arg_cols = [c for c in groups.columns if c not in _NOT_ARGS]
    return [(_cat_field(row), _dumps_args(_args_of(row, arg_cols))) for row in groups.iter_rows(named=True)]


def _marker_records(markers: pl.DataFrame, parts: list[tuple[bytes, bytes]]) -> Iterable[bytes]:
    for pid, tid, ts, _, name, s in markers.drop("__marker").iter_rows():
        cat, args = parts[s]
        yield (
            b'{"name":' + orjson.dumps(name) + cat + b',"ph":"i","s":"p","ts":' + orjson.dumps(ts)
            + b',"pid":' + orjson.dumps(pid) + b',"tid":' + orjson.dumps(tid) + b',"args":' + args + b"}"
        )  # fmt: skip


def _write_slices(writer: _EventWriter, events: pl.DataFrame, parts: list[tuple[bytes, bytes]]) -> tuple[int, int]:
    """Write the complete events (markers left out), sorted and nested per thread; (events written,
    children clipped)."""
    written = events.height - int(events.get_column("__marker").sum())
    if written == 0:
        return 0, 0
    slices = events.sort(["pid", "tid", "ts", "dur"], descending=[False, False, False, True])
    names: dict[str | None, bytes] = {}
    head = b""
    stack: list[int] = []
    current = None
    clipped = 0
    for offset in range(0, slices.height, _ROWS_PER_WRITE):
        lines = []
        for pid, tid, ts, dur, name, s, marker in slices.slice(offset, _ROWS_PER_WRITE).iter_rows():
            if marker:
                continue
            if (pid, tid) != current:
                current = (pid, tid)
                stack.clear()
                head = b',"pid":' + orjson.dumps(pid) + b',"tid":' + orjson.dumps(tid)
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
                + head + b',"args":' + args + b"}"
            )  # fmt: skip
        writer.write_all(lines)
    return written, clipped


# ------------------------------------------------------------------------------------------ flows

_FETCH, _NEXT = "dataloader.fetch", "dataloader.next"
_FLOW_KEY = ["host", "main", "loader", "batch"]


def _loader_events(events: pl.DataFrame, groups: pl.DataFrame) -> tuple[pl.DataFrame | None, pl.DataFrame | None]:
    """A file's dataloader.fetch and dataloader.next events (with a loader and a batch): host, pid, tid, ts,
    end, loader, batch."""
    if not {"loader", "batch"} <= set(groups.columns) or events.height == 0:
        return None, None
    facts = groups.select(
        pl.col("cat").cast(pl.String).alias("__cat"),
        (pl.col("host").cast(pl.String) if "host" in groups.columns else pl.lit(None, dtype=pl.String)).alias("host"),
        pl.col("loader").cast(pl.Int64, strict=False),
        pl.col("batch").cast(pl.Int64, strict=False),
    )
    rows = pl.concat([events.select("pid", "tid", "ts", "dur", "name"), facts.gather(events.get_column("__s"))],
                     how="horizontal")  # fmt: skip
    rows = rows.filter(
        (pl.col("__cat") == DATA_CAT) & pl.col("name").is_in([_FETCH, _NEXT])
        & pl.col("loader").is_not_null() & pl.col("batch").is_not_null()
    ).select(
        "name", pl.col("host").fill_null(""), pl.col("pid").cast(pl.Int64, strict=False), "tid",
        pl.col("ts").cast(pl.Int64), (pl.col("ts") + pl.col("dur")).cast(pl.Int64).alias("end"), "loader", "batch",
    )  # fmt: skip
    if rows.height == 0:
        return None, None
    return rows.filter(pl.col("name") == _FETCH).drop("name"), rows.filter(pl.col("name") == _NEXT).drop("name")


def _batch_flows(reads: list[_FileRead], tracks: _Tracks) -> list[bytes]:
    """Flow events from each worker's fetch of a batch to the main process's next() that received it."""
    fetches = [r.fetches for r in reads if r.fetches is not None and r.fetches.height]
    nexts = [r.nexts for r in reads if r.nexts is not None and r.nexts.height]
    if not fetches or not nexts:
        return []
    parents = {pid: row.get("ppid") for pid, row in tracks.starts.items() if isinstance(row.get("ppid"), int)}
    if not parents:
        return []
    parent = pl.DataFrame(
        {"pid": list(parents), "main": list(parents.values())}, schema={"pid": pl.Int64, "main": pl.Int64}
    )
    fetch = pl.concat(fetches).join(parent, on="pid").sort("ts")
    nxt = pl.concat(nexts).with_columns(pl.col("pid").alias("main"), (pl.col("end") - 1).alias("__before"))
    # each next: the latest fetch of its key that began before the next ended (ts <= end - 1)
    linked = (
        nxt.sort("__before")
        .join_asof(
            fetch.select(*_FLOW_KEY, pl.col("pid").alias("w_pid"), pl.col("tid").alias("w_tid"),
                         pl.col("ts").alias("w_ts")),
            left_on="__before", right_on="w_ts", by=_FLOW_KEY, strategy="backward", check_sortedness=False,
        )
        .filter(pl.col("w_ts").is_not_null())
        .sort(["pid", "tid", "ts", "w_pid", "w_ts"])
    )  # fmt: skip
    out = []
    for i, r in enumerate(linked.iter_rows(named=True)):
        args = {"loader": r["loader"], "batch": r["batch"]}
        common = {"name": "batch", "cat": DATA_CAT, "id": i + 1, "args": args}
        # "s" at the fetch's start (its slice is the deepest open there), "f" just before the next's end
        # (bound to the enclosing slice, "bp":"e"), never before the "s"
        out.append(orjson.dumps({**common, "ph": "s", "pid": r["w_pid"], "tid": r["w_tid"], "ts": r["w_ts"]}))
        end = max(r["ts"], r["end"] - 1)
        out.append(orjson.dumps({**common, "ph": "f", "bp": "e", "pid": r["pid"], "tid": r["tid"], "ts": end}))
    return out


def _gpu_launches(events: pl.DataFrame, read: pl.DataFrame, groups: pl.DataFrame) -> pl.DataFrame | None:
    """A file's device events (trace/launches.py) with the thread and instant that launched them: pid,
    tid, ts (the device slice), ltid, launch. `events` is the written table, `read` the events as read
    (the launch instant is theirs: it varies event by event, see _PER_EVENT)."""
    if "ltid" not in groups.columns or "launch" not in read.columns or events.height == 0:
        return None
    facts = groups.select(
        (pl.col("cat").cast(pl.String) == GPU_CAT).fill_null(False).alias("__gpu"),
        pl.col("ltid").cast(pl.Int64, strict=False),
    )
    rows = pl.concat([events.select("pid", "tid", "ts"), read.select(pl.col("launch").cast(pl.Int64, strict=False)),
                      facts.gather(events.get_column("__s"))], how="horizontal")  # fmt: skip
    rows = rows.filter(pl.col("__gpu") & pl.col("ltid").is_not_null() & pl.col("launch").is_not_null())
    return rows.select("pid", "tid", "ts", "ltid", "launch") if rows.height else None


def _gpu_flows(reads: list[_FileRead]) -> list[bytes]:
    """A flow arrow from each launching op (the slice open at the launch on its thread) to the device
    slice it started. Formatted from templates: a GPU trace has as many as it has kernels."""
    out = []
    n = 0
    for read in reads:
        if read.launches is None:
            continue
        for pid, tid, ts, ltid, launch in read.launches.iter_rows():
            n += 1
            out.append(_FLOW_START % (_GPU_FLOW_IDS + n, pid, ltid, launch))
            out.append(_FLOW_END % (_GPU_FLOW_IDS + n, pid, tid, max(ts, launch)))
    return out


def _comm_events(events: pl.DataFrame, read: pl.DataFrame, groups: pl.DataFrame) -> pl.DataFrame | None:
    """A file's collectives with a sequence number: pid, tid, ts, name, pg, seq, done (a complete event, not
    an issue marker). Functional collectives (op events with `comm_key`) as the analysis numbers them
    (analyze/comm.functional_collectives: group "<pg>/functional"), at their collective op's slice."""
    cols = set(groups.columns) | set(read.columns)
    has_comm, has_functional = {"pg", "seq"} <= cols, "comm_key" in cols
    if not (has_comm or has_functional) or events.height == 0:
        return None

    def col(name: str, dtype) -> pl.Series:
        if name in read.columns:
            return read.get_column(name).cast(dtype, strict=False).alias(name)
        if name in groups.columns:
            return groups.get_column(name).cast(dtype, strict=False).gather(events.get_column("__s")).alias(name)
        return pl.Series(name, [None] * events.height, dtype=dtype)

    cat = groups.get_column("cat").cast(pl.String).gather(events.get_column("__s")).alias("__cat")
    rows = pl.DataFrame([events.get_column(c) for c in ("pid", "tid", "ts", "dur", "name")] + [
        cat, col("pg", pl.String), col("seq", pl.Int64), col("state", pl.String), col("comm_op", pl.String),
        col("comm_pg", pl.String), col("comm_bytes", pl.Int64), col("comm_key", pl.String)])  # fmt: skip
    found = []
    if has_comm:
        comm = rows.filter((pl.col("__cat") == "comm") & pl.col("pg").is_not_null() & (pl.col("seq") >= 0))
        found.append(comm.select("pid", "tid", "ts", "name", "pg", "seq",
                                 (pl.col("state").fill_null("done") != "issued").alias("done")))  # fmt: skip
    if has_functional:
        ops = rows.filter((pl.col("__cat") == "dynamo") & pl.col("comm_key").is_not_null())
        paired = functional_collectives(ops) if ops.height else pl.DataFrame()
        if paired.height:
            found.append(paired.select("pid", "tid", "ts", pl.col("name").cast(pl.String), "pg", "seq",
                                       pl.lit(True).alias("done")))  # fmt: skip
    found = [f for f in found if f.height]
    return pl.concat(found, how="vertical_relaxed") if found else None


_COMM_FLOW_IDS = 1 << 40  # collective flows' ids start here, apart from the batch flows' 1, 2, ...


def _comm_flows(reads: list[_FileRead], tracks: _Tracks) -> tuple[list[bytes], int]:
    """One flow per collective that two or more processes have, through an instance on each (module
    docstring); (flow events, collectives linked)."""
    comms = [r.comms for r in reads if r.comms is not None and r.comms.height]
    if not comms:
        return [], 0
    order = {pid: (tracks._rank(pid) if tracks._rank(pid) is not None else 1 << 30, str(pid)) for pid in tracks.pids}
    rows = pl.concat(comms, how="vertical_relaxed")
    # per process one instance of each collective: its complete event, else its issue marker
    rows = rows.sort(["done", "ts"], descending=[True, False]).unique(["pg", "seq", "pid"], keep="first")
    out: list[bytes] = []
    linked = 0
    for (pg, seq), g in rows.group_by(["pg", "seq"]):
        if g.height < 2:
            continue
        linked += 1
        inst = sorted(g.iter_rows(named=True), key=lambda r: order.get(r["pid"], (1 << 30, str(r["pid"]))))
        ident = _COMM_FLOW_IDS + linked  # a number: Perfetto reads a string id as hex, and drops "comm:0:4"
        for i, r in enumerate(inst):
            ph = "s" if i == 0 else "f" if i == len(inst) - 1 else "t"
            ev = {"name": r["name"], "cat": "comm", "id": ident, "ph": ph, "pid": r["pid"], "tid": r["tid"],
                  "ts": r["ts"], "args": {"pg": pg, "seq": seq}}  # fmt: skip
            if ph != "s":
                ev["bp"] = "e"
            out.append(orjson.dumps(ev))
    return out, linked


# numeric ids (Perfetto reads a string id as hex and drops one that is not), apart from the batch flows' 1, 2,
# ... and the collectives' from _COMM_FLOW_IDS
_GPU_FLOW_IDS = 1 << 41
_FLOW_START = b'{"name":"launch","cat":"gpu","id":%d,"ph":"s","pid":%d,"tid":%d,"ts":%d}'
_FLOW_END = b'{"name":"launch","cat":"gpu","id":%d,"ph":"f","bp":"e","pid":%d,"tid":%d,"ts":%d}'


# ------------------------------------------------------------------------------------------ output


def _open_output(out: Path, compress: bool | None) -> io.BufferedIOBase:
    if compress is None:
        compress = out.name.endswith(".gz")
    try:
        if not out.parent.exists():
            out.parent.mkdir(parents=True, exist_ok=True)
        if compress:
            return gzip.open(out, "wb", compresslevel=3)
        return io.BufferedWriter(io.FileIO(out, "wb"), buffer_size=1 << 20)
    except OSError as exc:
        raise ConvertError(f"cannot write {out}: {exc.strerror or exc}; choose another -o path") from None


class _EventWriter:
    """The traceEvents array, one event a line, and the closing object."""

    def __init__(self, fh: io.BufferedIOBase):
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
