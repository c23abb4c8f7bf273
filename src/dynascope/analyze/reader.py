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
- `host` (the `hhash` resolved through `HH`; rows without `hhash`, such as op events, get the file's
  host when it has one `HH` record), `fname` (`fhash` through `FH`), and in `start` rows `cmd`/`exec`
  (SH) and `cwd` (FH) resolved;
- the attribution columns of the `OH` record an event's `op` refers to (an op event without `op` is
  op k = id - p_idx - 1 of its parent graph call, whose `op` names the graph; its record is the one
  with that `graph_op` and `index` k; `op` is then filled in): `kind`, `compile_id`, `graph`,
  `phase`, `node`, `op_type`, `target`, `layer`, `module_type`, `file`, `line`, `code`, `backend`,
  `tracer`, `epoch`, `step`, `image_idx`, `image_size`, `n_ops`, `shapes`, `dtypes` (and any other
  key an OH record has);
- `rank`, `world_size`, `local_rank` from the process's `start` record, attached to all its rows.

Not rows: metadata (`M`), counters (`C`), instants, flows and pydftracer's aggregated records.

Speed: our lines have a fixed shape, so the bulk of each file is split at commas by polars' CSV reader
(multi-threaded) against a template learned from the file's own lines and checked field by field;
up to three shapes are learned per file (ops, graph calls, regions); any line that fits none exactly
(metadata, escapes, commas inside strings, other layouts) is parsed with orjson. Memory: files are
inflated and parsed in 16 MB chunks, so the peak is the kept columns plus a few chunks, not the raw
file size (a Chrome-trace JSON *document* is the exception: it is parsed whole). For summaries of
big traces use `summarize.summarize_files`, which never holds op events as rows.
"""

from __future__ import annotations

import glob as _glob
import math
import os
import warnings
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson
import polars as pl

from ..errors import TraceFormatError
from . import _inflate

__all__ = [
    "ATTRIBUTION_COLUMNS",
    "ReadInfo",
    "TraceWarning",
    "expand_paths",
    "read_file",
    "read_trace",
    "read_trace_with_info",
]

# OH attribution fields (docs/trace-format.md), in display order.
ATTRIBUTION_COLUMNS = (
    "kind", "compile_id", "graph", "phase", "node", "op_type", "target", "layer", "module_type",
    "file", "line", "code", "backend", "tracer", "epoch", "step", "image_idx", "image_size", "n_ops",
    "shapes", "dtypes",
)  # fmt: skip
_INT_COLUMNS = {
    "id", "pid", "tid", "ts", "dur", "type", "p_idx", "level", "grad_enabled", "line", "epoch", "step",
    "image_idx", "image_size", "n_ops", "rank", "world_size", "local_rank", "ppid",
}  # fmt: skip
_CAT_COLUMNS = {
    "trace_file", "name", "cat", "host", "hhash", "op", "kind", "compile_id", "graph", "phase", "node",
    "op_type", "target", "layer", "module_type", "file", "code", "backend", "tracer", "shapes", "dtypes",
}  # fmt: skip
_RESOLVE_KEYS = {"pid", "name", "cat", "hhash", "fhash", "op", "cmd_hash", "exec_hash", "cwd", "id", "p_idx", "host"}
_TOP_KEYS = ("id", "name", "cat", "type", "pid", "tid", "ts", "dur", "ph")
_PH_INT = {1: "X", 2: "C", 3: "A", 4: "M"}
_TRACE_SUFFIXES = (".pfw", ".pfw.gz", ".json", ".json.gz")

_CHUNK = 16 << 20  # bytes of text parsed at once
_FAST_MIN_LINES = 512  # below this a chunk goes straight to orjson


class TraceWarning(UserWarning):
    """Something in a trace was skipped (a torn line, a truncated gzip member, a corrupt record)."""


@dataclass
class ReadInfo:
    """What reading found besides the events. `dropped_lines` counts lines skipped as unreadable."""

    files: list[str] = field(default_factory=list)
    events: int = 0
    dropped_lines: int = 0
    dropped_events: int = 0  # the writers' own count of events they could not write (`end` args)
    warnings: list[str] = field(default_factory=list)

    def merge(self, other: ReadInfo) -> ReadInfo:
        return ReadInfo(
            self.files + other.files,
            self.events + other.events,
            self.dropped_lines + other.dropped_lines,
            self.dropped_events + other.dropped_events,
            self.warnings + other.warnings,
        )


# ----------------------------------------------------------------------------------------------
# paths


def expand_paths(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Path]:
    """A path, a directory (its trace files, recursively), a glob, or a list of these; sorted, unique."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[Path] = []
    for p in paths:
        s = os.fspath(p)
        if any(ch in s for ch in "*?[") and not os.path.exists(s):
            hits = sorted(_glob.glob(s, recursive=True))
            if not hits:
                raise TraceFormatError(f"{s}: no file matches this pattern; check the path")
            out.extend(Path(h) for h in hits if os.path.isfile(h))
            continue
        path = Path(s)
        if path.is_dir():
            # .pfw files are traces by name; a .json beside them (an explanation, a manifest) only
            # if it looks like Chrome-trace JSON
            found = sorted(
                q
                for q in path.rglob("*")
                if q.is_file()
                and (q.name.endswith((".pfw", ".pfw.gz")) or (q.name.endswith((".json", ".json.gz")) and _looks_like_chrome(q)))
            )
            if not found:
                raise TraceFormatError(
                    f"{path}: directory holds no trace files (*.pfw, *.pfw.gz, *.json, *.json.gz)"
                )
            out.extend(found)
        elif path.is_file():
            out.append(path)
        else:
            raise TraceFormatError(f"{path}: no such file or directory")
    seen: set[Path] = set()
    unique = []
    for p in out:
        if p not in seen:
            seen.add(p)
            unique.append(p)
    return unique


def _looks_like_chrome(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            head = fh.read(1 << 16)
        if head.startswith(_inflate.GZIP_MAGIC):
            import zlib

            head = zlib.decompressobj(31).decompress(head, 1 << 16)
    except (OSError, Exception):  # noqa: BLE001 - unreadable: not ours to judge here
        return False
    head = head[:8192]
    return b'"traceEvents"' in head or (head.lstrip().startswith(b"[") and b'"ph"' in head)


# ----------------------------------------------------------------------------------------------
# public entry points


def read_trace(paths, *, columns: Iterable[str] | None = None, threads: int | None = None) -> pl.DataFrame:
    """Read one or many trace files into one DataFrame (see the module docstring for columns).

    Unreadable lines are skipped with a `TraceWarning` giving their count; a file that is not a trace
    raises `dynascope.errors.TraceFormatError`. The frame's `ReadInfo` is also available through
    `read_trace_with_info`.
    """
    frame, _ = read_trace_with_info(paths, columns=columns, threads=threads)
    return frame


def read_trace_with_info(
    paths, *, columns: Iterable[str] | None = None, threads: int | None = None
) -> tuple[pl.DataFrame, ReadInfo]:
    """Like `read_trace`, also returning a `ReadInfo` (files, counts, warnings)."""
    files = expand_paths(paths)
    cols = list(columns) if columns is not None else None
    results = map_files(lambda p: read_file(p, columns=cols), files, threads=threads)
    frames = [f for f, _ in results]
    info = ReadInfo()
    for _, i in results:
        info = info.merge(i)
    for msg in info.warnings:
        warnings.warn(msg, TraceWarning, stacklevel=2)
    frame = concat_frames(frames, cols)
    try:  # lets summarize(frame) report dropped lines and warnings; lost by any frame operation
        frame._dynascope_info = info  # type: ignore[attr-defined]
    except AttributeError:  # pragma: no cover
        pass
    return frame, info


def map_files(fn, files: list[Path], threads: int | None = None) -> list:
    """Apply fn to each file, in threads (inflate and polars release the GIL); results in order."""
    if threads is None:
        threads = min(len(files), max(1, min(4, os.cpu_count() or 1)))
    if threads <= 1 or len(files) <= 1:
        return [fn(p) for p in files]
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(fn, files))


def concat_frames(frames: list[pl.DataFrame], columns: list[str] | None = None) -> pl.DataFrame:
    frames = [f for f in frames if f.width]
    if not frames:
        return _empty_frame(columns)
    frame = frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed", rechunk=False)
    if columns is not None:
        frame = frame.select(columns)
    return frame


def _empty_frame(columns: list[str] | None) -> pl.DataFrame:
    base = ["trace_file", "name", "cat", "pid", "tid", "id", "ts", "dur"]
    cols = columns if columns is not None else base
    return pl.DataFrame({c: pl.Series(c, [], dtype=_dtype_for(c)) for c in cols})


def _dtype_for(col: str) -> pl.DataType:
    if col in _INT_COLUMNS:
        return pl.Int64()
    if col in _CAT_COLUMNS:
        return pl.Categorical()
    return pl.String()


# ----------------------------------------------------------------------------------------------
# one file


def read_file(path: str | os.PathLike, *, columns: list[str] | None = None) -> tuple[pl.DataFrame, ReadInfo]:
    """Read one trace file. Warnings are returned in the ReadInfo, not emitted."""
    frame, info, _ = read_file_state(path, columns=columns)
    return frame, info


def read_bytes(path: str | os.PathLike) -> tuple[str, bytes]:
    """(the path as text, the file's bytes), or one clear error."""
    name = str(path)
    try:
        return name, Path(path).read_bytes()
    except OSError as exc:
        raise TraceFormatError(f"{name}: cannot be read ({exc.strerror}); check the path") from None


def read_file_state(path, *, columns: list[str] | None = None, reducer=None):
    """read_file, also returning the file's state (metadata tables) for resolving reduced frames.

    `reducer(frame) -> frame` sees each parsed chunk (times normalised, before resolution) and returns
    the rows to keep; what it takes away it aggregates itself (summaries use this to pre-aggregate op
    events per chunk) and resolves later with `state.resolve_frame`.
    """
    name, data = read_bytes(path)
    state = _FileState(name, columns)
    state.reducer = reducer
    if not data.strip():
        state.warn("empty file, no events")
        return _empty_frame(columns), state.info(), state
    chunks = _text_chunks(data, state)
    first = next(chunks, None)
    if first is None:
        state.warn("no complete line could be read")
        return _empty_frame(columns), state.info(), state
    mode = state.mode = _sniff(first, name)
    if mode == "document":
        text = first + b"".join(chunks)
        state.add_events(_document_events(text, name))
        state.flush_rows()
    else:
        template: _Templates | None = None
        attempts = 0
        for chunk in _chain([first], chunks):
            # learn the line shapes from the first chunk; learn again when a chunk mostly misfits
            # (a file whose op events start late, or whose shapes change)
            if (template is None or state.misfit > 0.25) and attempts < 8:
                attempts += 1
                template = _Template.learn(chunk) or template
            state.parse_chunk(chunk, template)
        state.check_is_trace()
    frame = state.finish(columns)
    return frame, state.info(), state


def _chain(a, b):
    yield from a
    yield from b


def _text_chunks(data: bytes, state: _FileState) -> Iterator[bytes]:
    """Yield chunks of whole lines (each ending with a newline); the last line may lack one."""
    if data.startswith(_inflate.GZIP_MAGIC):
        pieces: Iterable[bytes] = _inflate_checked(data, state)
    else:
        pieces = (data[i : i + _CHUNK] for i in range(0, len(data), _CHUNK))
    pending: list[bytes] = []
    size = 0
    for piece in pieces:
        pending.append(piece)
        size += len(piece)
        if size >= _CHUNK:
            buf = b"".join(pending)
            cut = buf.rfind(b"\n")
            if cut < 0:
                pending, size = [buf], len(buf)
                continue
            yield buf[: cut + 1]
            rest = buf[cut + 1 :]
            pending, size = ([rest], len(rest)) if rest else ([], 0)
    if size:
        buf = b"".join(pending)
        cut = buf.rfind(b"\n")
        tail = buf[cut + 1 :]
        if cut >= 0:
            yield buf[: cut + 1]
        yield from last_piece(tail, cut, state, document=state.mode == "document")


def last_piece(tail: bytes, cut: int, state: _FileState, document: bool = False) -> Iterator[bytes]:
    """The bytes after a file's last newline: a whole record, a torn line (counted), or a one-line file.

    `cut` is where the last newline was (-1: the file has none).
    """
    if not tail.strip():
        return
    stripped = tail.strip().rstrip(b",")
    if document or stripped in (b"]", b"[") or _is_json_object(stripped):
        yield tail + b"\n"
    elif state.truncated_gzip or cut >= 0:
        state.dropped_lines += 1
        state.warn("last line is torn (the writer was cut short); skipped 1 line")
    else:
        yield tail  # a one-line file: let the sniffer judge it


def _inflate_checked(data: bytes, state: _FileState) -> Iterator[bytes]:
    try:
        yield from _inflate.inflate(data)
    except _inflate.Truncated as exc:
        state.truncated_gzip = True
        state.warn(f"gzip stream truncated ({exc}); kept every whole line before the cut")


def _is_json_object(b: bytes) -> bool:
    try:
        return isinstance(orjson.loads(b), dict)
    except orjson.JSONDecodeError:
        return False


def _sniff(first: bytes, name: str) -> str:
    """'lines' (JSON lines, optionally after a `[` line) or 'document' (one JSON value)."""
    text = first.lstrip()
    if not text:
        raise TraceFormatError(f"{name}: not a trace: the file is blank")
    head = text[:1]
    line = text.split(b"\n", 1)[0].strip()
    if head == b"[":
        if line == b"[":
            # DFTracer's layout puts one whole object on each following line; a pretty-printed
            # JSON array does not
            rest = [ln.strip() for ln in text.split(b"\n", 6)[1:6] if ln.strip()]
            if not rest or _try_obj(rest[0].rstrip(b",")) is not None:
                return "lines"
        return "document"
    if head == b"{":
        obj = _try_obj(line.rstrip(b","))
        if obj is not None:
            single = not text.strip().split(b"\n", 1)[1:]
            if "traceEvents" in obj or (single and "ph" not in obj and "name" not in obj):
                return "document"
            return "lines"
        return "document"
    raise TraceFormatError(
        f"{name}: not a trace: expected DFTracer JSON lines (.pfw/.pfw.gz) or Chrome-trace JSON "
        f"(a traceEvents object or an array of events), but it starts with {_snippet(text)}"
    )


def _try_obj(b: bytes):
    try:
        v = orjson.loads(b)
    except orjson.JSONDecodeError:
        return None
    return v if isinstance(v, dict) else None


def _snippet(b: bytes) -> str:
    s = b[:40].decode("utf-8", "replace").split("\n", 1)[0]
    return repr(s)


def _document_events(text: bytes, name: str) -> list:
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError:
        # Chrome-trace arrays may omit the closing bracket or end with a comma.
        fixed = text.rstrip().rstrip(b",")
        try:
            doc = orjson.loads(fixed + b"]") if fixed.lstrip().startswith(b"[") else None
        except orjson.JSONDecodeError:
            doc = None
        if doc is None:
            raise TraceFormatError(
                f"{name}: not a trace: expected Chrome-trace JSON (a traceEvents object or an array "
                f"of events) but the JSON is invalid or cut short"
            ) from None
    if isinstance(doc, dict):
        events = doc.get("traceEvents")
        if not isinstance(events, list):
            raise TraceFormatError(
                f"{name}: not a trace: a JSON object without a traceEvents list (keys: "
                f"{', '.join(list(doc)[:5])})"
            )
    elif isinstance(doc, list):
        events = doc
    else:
        raise TraceFormatError(f"{name}: not a trace: expected a JSON object or array of events")
    if events and not any(isinstance(e, dict) and "ph" in e for e in events[:100]):
        raise TraceFormatError(f"{name}: not a trace: its JSON array holds no events with a 'ph' field")
    return events


# ----------------------------------------------------------------------------------------------
# the fast path: a learned line template, split at commas by polars' CSV reader


@dataclass
class _Field:
    column: str  # output column
    pre: str  # text before the value in its comma-separated piece
    suf: str  # text after it
    kind: str  # "int", "str", "float"
    lowcard: bool = False  # an int with few distinct values: read as categories, mapped once each


class _Template:
    """The exact text shape of the commonest complete-event line of a file."""

    def __init__(self, fields: list[_Field]):
        self.fields = fields
        self.n = len(fields)

    @classmethod
    def learn(cls, chunk: bytes) -> _Templates | None:
        lines = chunk[: 1 << 19].split(b"\n", 300)[:300]
        shapes: dict[tuple, list] = {}
        for raw in lines:
            raw = raw.strip()
            if not raw.startswith(b"{"):
                continue
            obj = _try_obj(raw)
            if obj is None or _PH_INT.get(obj.get("ph"), obj.get("ph")) != "X":
                continue
            if obj.get("name") in ("start", "end"):
                continue
            fields = cls._fields(obj, raw)
            if fields is None:
                continue
            key = tuple((f.column, f.pre, f.suf, f.kind) for f in fields)
            entry = shapes.setdefault(key, [0, fields, [set() for _ in fields]])
            entry[0] += 1
            values = _field_values(obj)
            for seen, v in zip(entry[2], values):
                if len(seen) <= 16:
                    seen.add(v)
        for count, fields, seen in shapes.values():
            for f, vals in zip(fields, seen):
                f.lowcard = f.kind == "int" and count >= 32 and len(vals) <= 4
        ranked = sorted(shapes.values(), key=lambda v: -v[0])
        found = [cls(fields) for count, fields, _ in ranked[:_MAX_TEMPLATES] if count >= 2]
        return _Templates(found) if found else None

    @staticmethod
    def _fields(obj: dict, raw: bytes) -> list[_Field] | None:
        fields: list[_Field] = []
        pieces: list[str] = []
        keys = list(obj)
        for i, k in enumerate(keys):
            v = obj[k]
            if k == "args":
                if not isinstance(v, dict) or not v:
                    return None
                akeys = list(v)
                for j, ak in enumerate(akeys):
                    kind = _kind(v[ak])
                    if kind is None:
                        return None
                    col = ak if ak not in _TOP_KEYS else f"arg_{ak}"
                    pre = ('"args":{' if j == 0 else "") + orjson.dumps(ak).decode() + ":"
                    suf = "}" if j == len(akeys) - 1 else ""
                    fields.append(_Field(col, pre, suf, kind))
            else:
                kind = _kind(v)
                if kind is None:
                    return None
                fields.append(_Field(k, orjson.dumps(k).decode() + ":", "", kind))
        if not fields:
            return None
        fields[0].pre = "{" + fields[0].pre
        fields[-1].suf += "}"
        # a string's quotes belong to pre/suf, so the value between is the bare text
        for f in fields:
            if f.kind == "str":
                f.pre += '"'
                f.suf = '"' + f.suf
        # the line must be exactly the pieces joined by commas
        values = []
        for k in keys:
            if k == "args":
                values.extend(obj["args"].values())
            else:
                values.append(obj[k])
        for f, v in zip(fields, values):
            text = v if f.kind == "str" else orjson.dumps(v).decode()
            if f.kind == "str" and any(c in v for c in ',"\\'):
                return None
            if any(c in f.pre + f.suf for c in ",") or "," in text:
                return None
            pieces.append(f.pre + text + f.suf)
        if ",".join(pieces).encode() != raw:
            return None
        return fields

    def apply(self, raw: pl.DataFrame, keep: set | None) -> tuple[pl.DataFrame, pl.Series] | None:
        """Typed columns of the rows of `raw` (comma pieces c0, c1, ...) that fit, and the misfit mask."""
        n = self.n
        exprs = []  # typed values
        checks = []  # booleans on the raw pieces
        nonnull = []  # typed values that must not be null
        if f"c{n}" in raw.columns:
            checks.append(pl.col(f"c{n}").is_null())
        for i, f in enumerate(self.fields):
            c = pl.col(f"c{i}")
            categorical = raw.schema[f"c{i}"] == pl.Categorical
            if f.kind == "str" and categorical:
                cats = raw.get_column(f"c{i}").unique().drop_nulls().cast(pl.String).to_list()
                if len(cats) > 200_000:
                    return None
                old, new = [], []
                for s in cats:
                    if s.startswith(f.pre) and s.endswith(f.suf) and len(s) >= len(f.pre) + len(f.suf):
                        body = s[len(f.pre) : len(s) - len(f.suf)]
                        if '"' not in body and "\\" not in body:
                            old.append(s)
                            new.append(body)
                expr = c.replace_strict(old, new, default=None, return_dtype=pl.Categorical)
                nonnull.append(f.column)
            elif f.kind == "int" and categorical and raw.get_column(f"c{i}").n_unique() <= 4096:
                old, new = [], []
                for s in raw.get_column(f"c{i}").unique().drop_nulls().cast(pl.String).to_list():
                    if s.startswith(f.pre) and s.endswith(f.suf):
                        try:
                            new.append(int(s[len(f.pre) : len(s) - len(f.suf)]))
                        except ValueError:
                            continue
                        old.append(s)
                expr = c.replace_strict(old, new, default=None, return_dtype=pl.Int64)
                nonnull.append(f.column)
            else:
                if categorical:
                    c = c.cast(pl.String)
                lp, ls = len(f.pre), len(f.suf)
                checks.append(c.str.starts_with(f.pre))
                body = c.str.slice(lp) if not ls else c.str.slice(lp, c.str.len_bytes() - lp - ls)
                if ls:
                    checks.append(c.str.ends_with(f.suf))
                if keep is not None and f.column not in keep:
                    continue  # shape checked by the prefix; the value is not kept
                if f.kind == "str":
                    checks.append(~body.str.contains('"', literal=True) & ~body.str.contains("\\", literal=True))
                    expr = body.cast(pl.Categorical)
                else:
                    expr = body.cast(pl.Int64 if f.kind == "int" else pl.Float64, strict=False)
                    nonnull.append(f.column)
            exprs.append(expr.alias(f.column))
        out = raw.select(*exprs, pl.all_horizontal(checks).fill_null(False).alias("__ok"))
        ok_expr = pl.col("__ok")
        for col in nonnull:
            ok_expr = ok_expr & pl.col(col).is_not_null()
        if "ph" in out.columns:  # only complete events take the fast path
            ok_expr = ok_expr & pl.col("ph").cast(pl.String).is_in(["X", "1"])
        ok = out.select(ok_expr.alias("ok")).get_column("ok")
        out = out.drop("__ok").filter(ok)
        if "ph" in out.columns:
            out = out.drop("ph")
        return out, ~ok


_MAX_TEMPLATES = 3


class _Templates:
    """The commonest line shapes of a file, tried in order on one comma split of each chunk."""

    def __init__(self, templates: list[_Template]):
        self.templates = templates
        first = templates[0]
        width = max(t.n for t in templates) + 1
        # the first (commonest) shape decides the column types; the others cast what they need
        self.schema = {f"c{i}": pl.String for i in range(width)}
        for i, f in enumerate(first.fields):
            if f.kind == "str" or f.lowcard:
                self.schema[f"c{i}"] = pl.Categorical

    def parse(self, chunk: bytes, keep: set | None = None) -> tuple[list[pl.DataFrame], pl.Series] | None:
        """Typed frames of the lines that fit a shape, and the mask of lines that fit none."""
        try:
            raw = pl.read_csv(
                chunk,
                has_header=False,
                separator=",",
                quote_char=None,
                schema=self.schema,
                truncate_ragged_lines=True,
                missing_columns="insert",
                encoding="utf8-lossy",
            )
        except Exception:  # noqa: BLE001 - any CSV-level surprise: let orjson read this chunk
            return None
        res = self.templates[0].apply(raw, keep)
        if res is None:
            return None
        good, bad = res
        frames = [good]
        for t in self.templates[1:]:
            if not bad.any():
                break
            idx = bad.arg_true()
            sub = raw[idx]
            res = t.apply(sub, keep)
            if res is None:
                break
            g2, b2 = res
            if g2.height:
                frames.append(g2)
                bad = bad.scatter(idx, b2)
        return frames, bad


def _lines_at(chunk: bytes, mask: pl.Series) -> list[bytes] | None:
    """The lines of `chunk` (which ends with a newline) where `mask` is true; None if counts differ."""
    idx = mask.arg_true().to_list()
    n = mask.len()
    if chunk.count(b"\n") != n:
        return None
    if idx and idx[-1] < 2000:  # only near the start (a file's header): walk the first lines
        lines = chunk.split(b"\n", idx[-1] + 1)
        if len(lines) < idx[-1] + 1:
            return None
        return [lines[i] for i in idx]
    if idx and idx[0] >= n - 2000:  # only near the end (the `end` record)
        back = n - idx[0]
        lines = chunk[:-1].rsplit(b"\n", back)
        if len(lines) < back:
            return None
        tail = lines[-back:]
        return [tail[i - (n - back)] for i in idx]
    nl = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == 10)
    arr = np.asarray(idx, dtype=np.int64)
    starts = np.concatenate(([0], nl[:-1] + 1))
    return [chunk[starts[i] : nl[i]] for i in arr.tolist()]


def _field_values(obj: dict) -> list:
    out = []
    for k, v in obj.items():
        if k == "args" and isinstance(v, dict):
            out.extend(v.values())
        else:
            out.append(v)
    return out


def _kind(v) -> str | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return None if (math.isnan(v) or math.isinf(v)) else "float"
    if isinstance(v, str):
        return "str"
    return None


# ----------------------------------------------------------------------------------------------
# per-file state: metadata tables, slow-path rows, resolution


class _FileState:
    def __init__(self, name: str, columns: list[str] | None = None):
        self.name = name
        # columns the fast path keeps (None: all); hashes stay for resolution
        self.keep = None if columns is None else set(columns) | _RESOLVE_KEYS
        self.frames: list[pl.DataFrame] = []
        self.rows: list[dict] = []
        self.hosts: dict[str, str] = {}
        self.files: dict[str, str] = {}
        self.strings: dict[str, str] = {}
        self.oh: dict[str, dict] = {}
        self.oh_index: dict[tuple[str, int], str] = {}
        self.proc: dict[int, dict] = {}
        self.open_b: dict[tuple, list] = {}
        self.dropped_lines = 0
        self.dropped_events = 0
        self.truncated_gzip = False
        self.mode = ""
        self.reducer = None
        self.reduced = 0
        self.misfit = 0.0  # share of the last fast-path chunk's lines that fit no template
        self.events = 0
        self.seen_objects = 0
        self.seen_bad = 0
        self.first_bad: bytes | None = None
        self._warnings: list[str] = []

    def warn(self, msg: str) -> None:
        self._warnings.append(f"{self.name}: {msg}")

    def info(self) -> ReadInfo:
        return ReadInfo([self.name], self.events, self.dropped_lines, self.dropped_events, list(self._warnings))

    # -- parsing
    def parse_chunk(self, chunk: bytes, template: _Templates | None) -> None:
        if template is not None and chunk.count(b"\n", 0, 1 << 16) * (len(chunk) >> 16 or 1) >= _FAST_MIN_LINES:
            res = template.parse(chunk, self.keep)
            if res is not None:
                goods, bad_mask = res
                bad_n = bad_mask.sum()
                self.misfit = bad_n / max(1, bad_mask.len()) if bad_mask.len() >= 256 else 0.0
                lines: list | None = []
                if bad_mask.any():
                    lines = _lines_at(chunk, bad_mask)
                if lines is not None:  # else row counts disagree (never seen): parse the chunk slowly
                    goods = [g.select([c for c in g.columns if c in self.keep]) if self.keep is not None else g for g in goods]
                    goods = [g for g in goods if g.height]
                    observe = getattr(self.reducer, "observe", None)
                    if observe is not None:  # e.g. graph calls, before the ops that refer to them
                        for good in goods:
                            observe(good)
                    for good in goods:
                        self.seen_objects += good.height
                        self._add_frame(good, observed=True)
                    if lines:
                        self.parse_lines(lines)
                    return
        self.parse_lines(chunk.split(b"\n"))

    def parse_lines(self, lines: Iterable) -> None:
        loads = orjson.loads
        bad = 0
        for line in lines:
            line = line.strip()
            if not line or line in (b"[", b"]", "[", "]", b",", ","):
                continue
            if line[-1:] in (b",", ","):
                line = line[:-1]
            try:
                obj = loads(line)
            except orjson.JSONDecodeError:
                obj = None
            if not isinstance(obj, dict):
                bad += 1
                if self.first_bad is None:
                    self.first_bad = line if isinstance(line, bytes) else line.encode()
                continue
            self.add_event(obj)
        if bad:
            self.dropped_lines += bad
            self.seen_bad += bad
            self.warn(f"skipped {bad} line(s) that are not JSON objects")
        self.flush_rows()

    def add_events(self, events: Iterable) -> None:
        for e in events:
            if isinstance(e, dict):
                self.add_event(e)

    def add_event(self, e: dict) -> None:
        ph = e.get("ph")
        if isinstance(ph, int):
            ph = _PH_INT.get(ph, str(ph))
        if ph is None and "name" not in e:
            self.seen_bad += 1
            if self.first_bad is None:
                self.first_bad = orjson.dumps(e)
            return
        self.seen_objects += 1
        args = e.get("args")
        if not isinstance(args, dict):
            args = {}
        if ph == "M":
            self._metadata(e, args)
            return
        if ph == "B" or ph == "E":
            self._begin_end(e, ph, args)
            return
        if ph != "X":
            return  # counters, instants, flows, aggregated records: not complete events
        self._complete(e, args)

    def _metadata(self, e: dict, args: dict) -> None:
        name = e.get("name")
        if name in ("HH", "FH", "SH"):
            value, text = args.get("value"), args.get("name")
            if value is None or text is None:
                return
            table = self.hosts if name == "HH" else self.files if name == "FH" else self.strings
            for k in _hash_keys(value):
                table[k] = str(text)
        elif name == "OH":
            value = args.get("value")
            if value is None:
                return
            attrs = {k: v for k, v in args.items() if k not in ("value", "hhash", "hash", "graph_op", "index")}
            keys = _hash_keys(value)
            for k in keys + (_hash_keys(args["hash"]) if args.get("hash") is not None else []):
                self.oh[k] = attrs
            # op events may carry no reference: op k of a graph call has id = p_idx + 1 + k, and the
            # graph event's `op` names the graph (graph_op) whose op k this record describes
            if args.get("graph_op") is not None and isinstance(args.get("index"), int):
                for g in _hash_keys(args["graph_op"]):
                    self.oh_index[(g, args["index"])] = keys[0]
        elif name == "process_name":
            pid = e.get("pid")
            if pid is not None and "name" in args:
                self.proc.setdefault(_int(pid), {})["process_name"] = str(args["name"])

    def _begin_end(self, e: dict, ph: str, args: dict) -> None:
        key = (e.get("pid"), e.get("tid"))
        stack = self.open_b.setdefault(key, [])
        if ph == "B":
            stack.append(e)
            return
        if not stack:
            return
        b = stack.pop()
        merged = dict(b)
        bargs = b.get("args") if isinstance(b.get("args"), dict) else {}
        merged["args"] = {**bargs, **args}
        try:
            merged["dur"] = float(e["ts"]) - float(b["ts"])
        except (KeyError, TypeError, ValueError):
            return
        self._complete(merged, merged["args"])

    def _complete(self, e: dict, args: dict) -> None:
        row = {}
        for k, v in e.items():
            if k in ("args", "ph"):
                continue
            row[k] = v
        for k, v in args.items():
            if k in _TOP_KEYS or k == "trace_file":
                k = f"arg_{k}"
            row[k] = v
        if e.get("name") == "start" and e.get("cat") == "dftracer":
            pid = _int(e.get("pid"))
            info = self.proc.setdefault(pid, {})
            for k in ("rank", "world_size", "local_rank"):
                if k in args:
                    info[k] = args[k]
        elif e.get("name") == "end" and e.get("cat") == "dftracer":
            d = args.get("dropped")
            if isinstance(d, int):
                self.dropped_events += d
        self.rows.append(row)
        if len(self.rows) >= 200_000:
            self.flush_rows()

    def flush_rows(self) -> None:
        if self.rows:
            frame = _rows_to_frame(self.rows)
            self.rows = []
            self._add_frame(frame)

    def _add_frame(self, frame: pl.DataFrame, observed: bool = False) -> None:
        if self.reducer is not None:
            observe = getattr(self.reducer, "observe", None)
            if observe is not None and not observed:
                observe(frame)
            frame = self._normalize_times(frame)
            casts = [pl.col(c).cast(pl.Int64, strict=False) for c in ("pid", "tid") if c in frame.columns and frame.schema[c] != pl.Int64]
            if casts:
                frame = frame.with_columns(casts)
            before = frame.height
            frame = self.reducer(frame)
            self.reduced += before - frame.height
        if frame.height:
            self.frames.append(frame)

    def resolve_frame(self, frame: pl.DataFrame, columns: list[str] | None = None) -> pl.DataFrame:
        """Resolve hashes (host, OH attribution, rank) in a frame made of this file's rows."""
        frame = frame.with_columns(pl.lit(self.name, dtype=pl.Categorical).alias("trace_file"))
        return _standard_types(self._resolve(frame, columns))

    def check_is_trace(self) -> None:
        if self.seen_objects == 0 and not self.frames:
            what = repr(self.first_bad[:40].decode("utf-8", "replace")) if self.first_bad else "nothing"
            raise TraceFormatError(
                f"{self.name}: not a trace: expected DFTracer JSON lines (.pfw/.pfw.gz) or Chrome-trace "
                f"JSON, but no line is a JSON event (first line: {what})"
            )

    # -- resolution
    def finish(self, columns: list[str] | None) -> pl.DataFrame:
        self.flush_rows()
        for key, stack in self.open_b.items():
            if stack:
                self.warn(f"{len(stack)} 'B' event(s) without a matching 'E' on pid/tid {key}; skipped")
        frames = [f for f in self.frames if f.height]
        self.frames = []
        self.events = self.reduced
        if not frames:
            return _empty_frame(columns)
        frame = frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed", rechunk=False)
        frame = frame.with_columns(pl.lit(self.name, dtype=pl.Categorical).alias("trace_file"))
        frame = self._normalize_times(frame)
        frame = self._resolve(frame, columns)
        frame = _standard_types(frame)
        self.events += frame.height
        if columns is not None:
            frame = frame.select([pl.col(c) if c in frame.columns else pl.lit(None, dtype=_dtype_for(c)).alias(c) for c in columns])
        return frame

    def _normalize_times(self, frame: pl.DataFrame) -> pl.DataFrame:
        exprs = []
        for c in ("ts", "dur"):
            if c in frame.columns and frame.schema[c] != pl.Int64:
                exprs.append(pl.col(c).cast(pl.Float64, strict=False).round(0).cast(pl.Int64, strict=False))
        if "dur" not in frame.columns:
            exprs.append(pl.lit(0, dtype=pl.Int64).alias("dur"))
        return frame.with_columns(exprs) if exprs else frame

    def _resolve(self, frame: pl.DataFrame, columns: list[str] | None) -> pl.DataFrame:
        want = set(columns) if columns is not None else None
        if self.oh_index and "p_idx" in frame.columns and "id" in frame.columns and "cat" in frame.columns:
            frame = self._derive_op_refs(frame)
        cols = set(frame.columns)
        if want is None or "host" in want:
            single = set(self.hosts.values())
            fallback = pl.lit(single.pop() if len(single) == 1 else None, dtype=pl.String)
            mapped = _map_hash("hhash", self.hosts, frame).cast(pl.String) if "hhash" in cols else pl.lit(None, dtype=pl.String)
            if "host" in cols:  # a `host` arg (the start record has one)
                mapped = pl.coalesce(mapped, pl.col("host").cast(pl.String))
            if "hhash" in cols or "host" in cols or len(set(self.hosts.values())) == 1:
                frame = frame.with_columns(pl.coalesce(mapped, fallback).cast(pl.Categorical).alias("host"))
        if "fhash" in cols and (want is None or "fname" in want):
            frame = frame.with_columns(_map_hash("fhash", self.files, frame).alias("fname"))
        for src, table, dst in (("cmd_hash", self.strings, "cmd"), ("exec_hash", self.strings, "exec"), ("cwd", self.files, "cwd")):
            if src in cols and table and (want is None or dst in want):
                frame = frame.with_columns(
                    pl.coalesce(_map_hash(src, table, frame), pl.col(src).cast(pl.String)).alias(dst)
                )
        if "op" in cols and self.oh:
            frame = self._join_oh(frame, want)
        if self.proc:
            keys = sorted({k for v in self.proc.values() for k in v})
            if want is not None:
                keys = [k for k in keys if k in want]
            if keys:  # per-process facts from `start`, mapped by pid (no copy of the frame)
                pids = [p for p in self.proc if isinstance(p, int)]
                exprs = []
                for k in keys:
                    vals = _dict_columns_frame({k: [self.proc[p].get(k) for p in pids]}).get_column(k)
                    exprs.append(
                        pl.col("pid").cast(pl.Int64, strict=False).replace_strict(pids, vals, default=None, return_dtype=vals.dtype).alias(k)
                    )
                frame = frame.with_columns(exprs)
        return frame

    def graph_refs(self, frame: pl.DataFrame) -> pl.DataFrame:
        return graph_refs(frame)

    def index_table(self) -> pl.DataFrame:
        keys = list(self.oh_index)
        return pl.DataFrame(
            {"__gop": [k[0] for k in keys], "__k": [k[1] for k in keys], "__ref": list(self.oh_index.values())},
            schema={"__gop": pl.String, "__k": pl.Int64, "__ref": pl.String},
        )

    def _derive_op_refs(self, frame: pl.DataFrame) -> pl.DataFrame:
        """Fill `op` of op events that carry no reference from their parent graph call.

        Works on a narrow copy (pid, p_idx, id, cat, op) so the frame itself is not copied."""
        if "op" not in frame.columns:
            frame = frame.with_columns(pl.lit(None, dtype=pl.String).alias("op"))
        graphs = self.graph_refs(frame)
        if graphs.height == 0:
            return frame
        need = (pl.col("cat") == "dynamo") & pl.col("op").is_null() & pl.col("p_idx").is_not_null()
        narrow = frame.select(
            pl.col("pid").cast(pl.Int64),
            pl.col("p_idx").cast(pl.Int64),
            pl.when(need).then(pl.col("id") - pl.col("p_idx") - 1).otherwise(None).cast(pl.Int64).alias("__k"),
        )
        narrow = narrow.join(graphs, on=["pid", "p_idx"], how="left", maintain_order="left").join(
            self.index_table(), on=["__gop", "__k"], how="left", maintain_order="left"
        )
        ref = narrow.get_column("__ref")
        return frame.with_columns(pl.coalesce(_norm_hash_expr("op", frame), pl.lit(ref)).alias("op"))

    def _join_oh(self, frame: pl.DataFrame, want: set | None) -> pl.DataFrame:
        """The OH attribution of each row's `op`, one column at a time (no copy of the frame)."""
        keys = list(self.oh)
        attr_names: list[str] = []
        for attrs in self.oh.values():
            for k in attrs:
                if k not in attr_names:
                    attr_names.append(k)
        if want is not None:
            attr_names = [k for k in attr_names if k in want]
        if not attr_names:
            return frame
        table = _dict_columns_frame({k: [self.oh[h].get(k) for h in keys] for k in attr_names})
        opcol = frame.get_column("op")
        if opcol.dtype == pl.Categorical:
            key = pl.col("op")
            present = set(opcol.unique().drop_nulls().cast(pl.String).to_list())
        else:
            key = _norm_hash_expr("op", frame)
            present = set(frame.select(key.unique().drop_nulls()).to_series().to_list())
        use = [i for i, h in enumerate(keys) if h in present]
        old = [keys[i] for i in use]
        exprs = []
        for k in attr_names:
            col = table.get_column(k)
            dt = pl.Categorical if col.dtype == pl.String else col.dtype
            new = col.gather(use).cast(dt) if use else pl.Series(k, [], dtype=dt)
            mapped = key.replace_strict(old, new, default=None, return_dtype=dt)
            if k in frame.columns:
                mapped = pl.coalesce(pl.col(k), mapped) if frame.schema[k] == dt else pl.coalesce(pl.col(k).cast(pl.String), mapped.cast(pl.String))
            exprs.append(mapped.alias(k))
        return frame.with_columns(exprs)


def graph_refs(frame: pl.DataFrame) -> pl.DataFrame:
    """(pid, p_idx, __gop): each graph event's id (as its ops' p_idx) and its graph reference."""
    if not {"cat", "op", "id", "pid"} <= set(frame.columns):
        return pl.DataFrame(schema={"pid": pl.Int64, "p_idx": pl.Int64, "__gop": pl.String})
    return frame.filter((pl.col("cat") == "dynamo.graph") & pl.col("op").is_not_null()).select(
        pl.col("pid").cast(pl.Int64),
        pl.col("id").cast(pl.Int64).alias("p_idx"),
        _norm_hash_expr("op", frame).alias("__gop"),
    )


def norm_hash(col: str, frame: pl.DataFrame) -> pl.Expr:
    """A hash column as the string key metadata tables use (ints in decimal, hex lower-case)."""
    return _norm_hash_expr(col, frame)


def _hash_keys(value) -> list[str]:
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


def _norm_hash_expr(col: str, frame: pl.DataFrame) -> pl.Expr:
    dt = frame.schema[col]
    if dt.is_integer():
        return pl.col(col).cast(pl.String)
    return pl.col(col).cast(pl.String).str.to_lowercase()


def _map_hash(col: str, table: dict[str, str], frame: pl.DataFrame) -> pl.Expr:
    if not table:
        return pl.lit(None, dtype=pl.Categorical)
    dt = frame.schema[col]
    if dt == pl.Categorical:
        uniq = frame.get_column(col).unique().drop_nulls().cast(pl.String).to_list()
        old = [u for u in uniq if u.lower() in table]
        new = [table[u.lower()] for u in old]
        return pl.col(col).replace_strict(old, new, default=None, return_dtype=pl.Categorical)
    return _norm_hash_expr(col, frame).replace_strict(table, default=None, return_dtype=pl.String).cast(pl.Categorical)


def _int(v):
    try:
        return int(v)
    except (TypeError, ValueError):
        return v


def _rows_to_frame(rows: list[dict]) -> pl.DataFrame:
    keys: dict[str, None] = {}
    for r in rows:
        for k in r:
            keys.setdefault(k, None)
    data = {k: [r.get(k) for r in rows] for k in keys}
    return _dict_columns_frame(data)


def _dict_columns_frame(data: dict[str, list]) -> pl.DataFrame:
    cols = {}
    for k, values in data.items():
        kinds = {type(v) for v in values if v is not None}
        if not kinds:
            cols[k] = pl.Series(k, values, dtype=pl.String)
        elif kinds <= {int}:
            try:
                cols[k] = pl.Series(k, values, dtype=pl.Int64)
            except (OverflowError, pl.exceptions.PolarsError):
                cols[k] = pl.Series(k, [None if v is None else str(v) for v in values], dtype=pl.String)
        elif kinds <= {int, float}:
            cols[k] = pl.Series(k, values, dtype=pl.Float64)
        elif kinds <= {bool}:
            cols[k] = pl.Series(k, values, dtype=pl.Boolean)
        elif kinds <= {str}:
            cols[k] = pl.Series(k, values, dtype=pl.String)
        else:
            cols[k] = pl.Series(
                k,
                [None if v is None else v if isinstance(v, str) else orjson.dumps(v).decode() for v in values],
                dtype=pl.String,
            )
    return pl.DataFrame(cols)


def _standard_types(frame: pl.DataFrame) -> pl.DataFrame:
    exprs = []
    for c, dt in frame.schema.items():
        if c in _INT_COLUMNS and dt != pl.Int64:
            if dt.is_numeric() or dt == pl.Boolean:
                exprs.append(pl.col(c).cast(pl.Int64, strict=False))
            elif dt in (pl.String, pl.Categorical):
                as_int = frame.get_column(c).cast(pl.String).cast(pl.Int64, strict=False)
                if as_int.null_count() == frame.get_column(c).null_count():
                    exprs.append(pl.col(c).cast(pl.String).cast(pl.Int64, strict=False))
        elif c in _CAT_COLUMNS and dt != pl.Categorical:
            exprs.append(pl.col(c).cast(pl.String).cast(pl.Categorical))
    return frame.with_columns(exprs) if exprs else frame

