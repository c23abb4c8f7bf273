"""Read trace files into one polars DataFrame: one row per complete event, args flattened to columns.

Reads dynascope's `.pfw`/`.pfw.gz` (see docs/trace-format.md), pydftracer's files in each layout it has
written (leading `[` or not, string or integer `ph`, the `type` column, hashes as 16-hex strings or
integers resolved through `HH`/`FH`/`SH`), and Chrome-trace JSON such as torch.profiler's (`.json`,
`.json.gz`, a `traceEvents` object or a bare array; `B`/`E` pairs become complete events).

Columns of the frame (those a file has; `columns=` keeps a subset):

- `trace_file` (the file the event came from), `name`, `cat`, `pid`, `tid`, `id`, `ts`, `dur`
  (integer microseconds; Chrome-trace float times are rounded), `type` (pydftracer generation C);
- every `args` key as a column (`hhash`, `p_idx`, `level`, `grad_enabled`, `op`, `epoch`, `step`,
  `compile_id`, ...); an args key that clashes with a top-level one is named `arg_<key>`;
  nested values become JSON text;
- what the file's metadata resolves (`resolve.py`): `host`, `fname`, `cmd`/`exec`/`cwd`, the OH
  attribution columns (docs/trace-format.md: `layer`, `module_type`, `phase`, `graph`, ...), `rank`,
  `world_size`, `local_rank`, `process_name`.

Not rows: metadata (`M`), counters (`C`) other than memory samples (`"cat":"memory"`: rows with `dur` 0 and
the sampled values, `rss` ...), instants, flows and pydftracer's aggregated records
(`records.py` says what each record kind means).

The jobs, one module each: `paths` (which files), `lines` (bytes to whole lines, sniffing), `records`
(what a record means), `templates` (the CSV fast path), `resolve` (hashes and references), `columns`
(types). This module drives them for one file (`FileReader`) and for many (`read_trace`).

Memory: files are inflated and parsed in 16 MB chunks, so the peak is the kept columns plus a few
chunks, not the raw file size (a Chrome-trace JSON *document* is the exception: it is parsed whole).
For summaries of big traces use `summarize.summarize_files`, which never holds op events as rows.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from typing import Protocol

import polars as pl

from dynascope.analyze.read import lines as _lines
from dynascope.analyze.read.columns import dtype_for, empty_frame, standard_types
from dynascope.analyze.read.line_shapes import LineTemplates, lines_at
from dynascope.analyze.read.paths import expand_paths, map_files
from dynascope.analyze.read.readinfo import FileLog, ReadInfo, TraceWarning
from dynascope.analyze.read.records import FileTables, RecordReader
from dynascope.analyze.read.resolve import index_table, normalize_times, resolve
from dynascope.errors import TraceFormatError

__all__ = [
    "ChunkReducer",
    "FileReader",
    "ReadInfo",
    "TraceWarning",
    "read_file",
    "read_file_reduced",
    "read_trace",
    "read_trace_with_info",
]

# columns the resolution needs, kept by the fast path whatever `columns` asks for
_RESOLVE_KEYS = {"pid", "name", "cat", "hhash", "fhash", "op", "cmd_hash", "exec_hash", "cwd", "id", "p_idx", "host"}
FAST_MIN_LINES = 512  # below this a chunk goes straight to orjson (module attribute: tests make it small)
_MAX_LEARN_ATTEMPTS = 8
_RELEARN_MISFIT = 0.25  # learn the shapes again when this share of a chunk's lines fits none


class ChunkReducer(Protocol):
    """Takes rows out of each parsed chunk and aggregates them itself (summaries pre-aggregate op events)."""

    def observe(self, frame: pl.DataFrame) -> None:
        """Sees every frame of a chunk before any is reduced."""

    def __call__(self, frame: pl.DataFrame) -> pl.DataFrame:
        """The rows to keep."""


# ----------------------------------------------------------------------------------------------
# many files


def read_trace(paths, *, columns: Iterable[str] | None = None, threads: int | None = None) -> pl.DataFrame:
    """Read one or many trace files into one DataFrame (see the module docstring for columns).

    Unreadable lines are skipped with a `TraceWarning` giving their count; a file that is not a trace
    raises `dynascope.errors.TraceFormatError`. `read_trace_with_info` also returns a `ReadInfo`.
    """
    frame, _ = read_trace_with_info(paths, columns=columns, threads=threads)
    return frame


def read_trace_with_info(
    paths, *, columns: Iterable[str] | None = None, threads: int | None = None, keep_marks: bool = False
) -> tuple[pl.DataFrame, ReadInfo]:
    """Like `read_trace`, also returning a `ReadInfo` (files, counts, warnings; instants and counters
    in `marks` with `keep_marks`)."""
    files = expand_paths(paths)
    cols = list(columns) if columns is not None else None
    results = map_files(lambda p: read_file(p, columns=cols, keep_marks=keep_marks), files, threads=threads)
    info = ReadInfo.merged(one for _, one in results)
    for msg in info.warnings:
        warnings.warn(msg, TraceWarning, stacklevel=2)
    return concat_frames([f for f, _ in results], cols), info


def concat_frames(frames: list[pl.DataFrame], columns: list[str] | None = None) -> pl.DataFrame:
    frames = [f for f in frames if f.width]
    if not frames:
        return empty_frame(columns)
    frame = frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed", rechunk=False)
    return frame.select(columns) if columns is not None else frame


# ----------------------------------------------------------------------------------------------
# one file


def read_file(
    path: str | os.PathLike, *, columns: list[str] | None = None, keep_marks: bool = False
) -> tuple[pl.DataFrame, ReadInfo]:
    """Read one trace file. Warnings are returned in the ReadInfo, not emitted."""
    frame, info, _ = read_file_reduced(path, columns=columns, keep_marks=keep_marks)
    return frame, info


def read_file_reduced(
    path, *, columns: list[str] | None = None, reducer: ChunkReducer | None = None, keep_marks: bool = False
) -> tuple[pl.DataFrame, ReadInfo, FileReader]:
    """read_file with a `reducer` that sees each parsed chunk (times normalised, before resolution) and
    keeps what it returns; also the FileReader, whose metadata resolves what the reducer aggregated."""
    name, data = _lines.read_bytes(path)
    reader = FileReader(name, columns, reducer, keep_marks)
    if not data.strip():
        reader.log.warn("empty file, no events")
        return empty_frame(columns), reader.info(), reader
    mode = ""
    chunks = _lines.text_chunks(data, reader.log, is_document=lambda: mode == _lines.DOCUMENT)
    del data
    first = next(chunks, None)
    if first is None:
        reader.log.warn("no complete line could be read")
        return empty_frame(columns), reader.info(), reader
    mode = _lines.sniff(first, name)
    if mode == _lines.DOCUMENT:
        reader.add_records(_lines.document_events(first + b"".join(chunks), name))
    else:
        reader.parse_chunk(first)
        for chunk in chunks:
            reader.parse_chunk(chunk)
        reader.check_is_trace()
    frame = reader.finish()
    return frame, reader.info(), reader


class FileReader:
    """One file's reading: chunks through the line templates or orjson, rows through the reducer,
    then resolution through the file's metadata."""

    def __init__(
        self, name: str, columns: list[str] | None = None, reducer: ChunkReducer | None = None, keep_marks: bool = False
    ):
        self.name = name
        self.columns = columns
        # columns the fast path keeps (None: all); hashes stay for resolution
        self.keep = None if columns is None else set(columns) | _RESOLVE_KEYS
        self.reducer = reducer
        self.log = FileLog(name)
        self.tables = FileTables()
        self.records = RecordReader(self.tables, self.log, keep_marks)
        self.misfit = 0.0  # share of the last templated chunk's lines that fit no shape
        self._templates: LineTemplates | None = None
        self._learn_attempts = 0
        self._frames: list[pl.DataFrame] = []
        self._template_rows = 0  # rows the templates (or a caller's scanner) took
        self._reduced = 0
        self._events = 0

    def info(self) -> ReadInfo:
        return self.log.info(self._events, self.tables.thread_names, self.records.marks, self.tables.sources)

    # -- parsing

    def parse_chunk(self, chunk: bytes) -> None:
        """Parse a chunk of whole lines: the lines that fit a learned shape in bulk, the rest by orjson."""
        if (self._templates is None or self.misfit > _RELEARN_MISFIT) and self._learn_attempts < _MAX_LEARN_ATTEMPTS:
            # learn from the first chunk; again when a chunk mostly misfits (op events start late, shapes change)
            self._learn_attempts += 1
            self._templates = LineTemplates.learn(chunk) or self._templates
        if (
            self._templates is None
            or not self._enough_lines(chunk)
            or not self._parse_templated(self._templates, chunk)
        ):
            self._add_lines(chunk.split(b"\n"))

    def add_records(self, events: list) -> None:
        """The events of a JSON document."""
        self.records.add_all(events)
        self._take_record_frames()

    def _add_lines(self, lines: list[bytes]) -> None:
        self.records.add_lines(lines)
        self._take_record_frames()

    def _take_record_frames(self) -> None:
        for frame in self.records.take_frames():
            self.add_frame(frame)

    @staticmethod
    def _enough_lines(chunk: bytes) -> bool:
        return chunk.count(b"\n", 0, 1 << 16) * (len(chunk) >> 16 or 1) >= FAST_MIN_LINES

    def _parse_templated(self, templates: LineTemplates, chunk: bytes) -> bool:
        res = templates.parse(chunk, self.keep)
        if res is None:
            return False
        goods, misfits = res
        self.misfit = int(misfits.sum()) / max(1, misfits.len()) if misfits.len() >= 256 else 0.0
        rest = lines_at(chunk, misfits) if misfits.any() else []
        if rest is None:  # row counts disagree (never seen): parse the chunk slowly
            return False
        if self.keep is not None:
            goods = [g.select([c for c in g.columns if c in self.keep]) for g in goods]
        goods = [g for g in goods if g.height]
        if self.reducer is not None:  # e.g. graph calls, before the ops that refer to them
            for good in goods:
                self.reducer.observe(good)
        for good in goods:
            self._template_rows += good.height
            self.add_frame(good, observed=True)
        if rest:
            self._add_lines(rest)
        return True

    def add_frame(self, frame: pl.DataFrame, observed: bool = False) -> None:
        """Rows of this file, parsed: through the reducer (if any), then kept."""
        if self.reducer is not None:
            if not observed:
                self.reducer.observe(frame)
            frame = normalize_times(frame)
            casts = [
                pl.col(c).cast(pl.Int64, strict=False)
                for c in ("pid", "tid")
                if c in frame.columns and frame.schema[c] != pl.Int64
            ]
            if casts:
                frame = frame.with_columns(casts)
            before = frame.height
            frame = self.reducer(frame)
            self._reduced += before - frame.height
        if frame.height:
            self._frames.append(frame)

    def add_taken(self, rows: int, reduced: int) -> None:
        """Count events a caller took from this file's text itself (`reduced` of them aggregated)."""
        self._template_rows += rows
        self._reduced += reduced

    def check_is_trace(self) -> None:
        if self.records.objects == 0 and self._template_rows == 0 and not self._frames:
            bad = self.records.first_bad
            what = repr(bad[:40].decode("utf-8", "replace")) if bad else "nothing"
            raise TraceFormatError(
                f"{self.name}: not a trace: expected DFTracer JSON lines (.pfw/.pfw.gz) or Chrome-trace "
                f"JSON, but no line is a JSON event (first line: {what})"
            )

    # -- the end of the file

    def finish(self) -> pl.DataFrame:
        """The file's rows (what the reducer kept), resolved, in the asked columns."""
        self.records.close()
        self._take_record_frames()
        frames, self._frames = self._frames, []
        self._events = self._reduced
        columns = self.columns
        if not frames:
            return empty_frame(columns)
        frame = frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed", rechunk=False)
        frame = self.resolve_frame(normalize_times(frame), columns)
        self._events += frame.height
        if columns is not None:
            frame = frame.select(
                [pl.col(c) if c in frame.columns else pl.lit(None, dtype=dtype_for(c)).alias(c) for c in columns]
            )
        return frame

    def resolve_frame(self, frame: pl.DataFrame, columns: list[str] | None = None) -> pl.DataFrame:
        """Resolve hashes (host, OH attribution, rank) in a frame made of this file's rows."""
        frame = frame.with_columns(pl.lit(self.name, dtype=pl.Categorical).alias("trace_file"))
        return standard_types(resolve(frame, self.tables, columns))

    def index_table(self) -> pl.DataFrame:
        return index_table(self.tables)
