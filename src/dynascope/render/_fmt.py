"""Shared formatting for every renderer: number formats, fitting a table to a width, and the views of a
Summary that several renderers print (the tables' columns are in render/table_specs.py). A column the
analysis side did not produce is skipped, never an error.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import polars as pl

from dynascope.analyze.summary import Summary
from dynascope.artifacts.memory import human_bytes
from dynascope.render.table_specs import SPEC_BY_ATTR, STEP_PARTS, Col, TableSpec


@dataclass(frozen=True)
class FitCol:
    """What fitting needs of one column: its header's and widest cell's widths (terminal cells), whether it
    is a number (never narrower than its widest cell), and a text column's Col.min_width and max_width;
    `floor`: the narrowest a text column gets even at step 3 (where its cut names would read alike)."""

    label: int
    widest: int
    numeric: bool
    min_width: int = 12
    max_width: int | None = None
    floor: int = 0


def table_width(widths: Iterable[int]) -> int:
    """The width of a terminal table with these column widths (rich's SIMPLE_HEAD box, no edge padding:
    a space at each edge, one between columns, one padding each side of an inner column edge)."""
    w = list(widths)
    return sum(w) + 3 * len(w) - 1 if w else 0


def _max_widths(cols: list[FitCol]) -> list[int]:
    """The widest each column gets: a number its widest cell, text up to its max_width (its header at least)."""
    natural = [max(c.label, c.widest) for c in cols]
    return [n if c.numeric or c.max_width is None else max(min(n, c.max_width), c.label)
            for c, n in zip(cols, natural, strict=True)]


def min_widths(cols: list[FitCol]) -> list[int]:
    """The narrowest each column gets before a column is left out: a number its widest cell, text its
    min_width (or header, or widest cell where that is less)."""
    return [h if c.numeric else min(h, max(c.min_width, c.label)) for c, h in zip(cols, _max_widths(cols), strict=True)]


def fit_widths(width: int, cols: list[FitCol], drop: Iterable[int] = (), keep: Iterable[int] = ()) -> list[int | None]:
    """Each column's width in a table at most `width` wide, None for a column left out, in the order the
    comment above TABLES documents: text narrows to its min_width, then the `drop` columns (indexes) go
    first to last, then text narrows to its header, then columns go from the right (never the first, nor
    one in `keep`: a column kept because it tells rows apart, while another is left to go). A number
    column always gets its widest cell."""
    keep = set(keep)
    drop = [i for i in drop if i not in keep]
    high = _max_widths(cols)
    low = min_widths(cols)
    floor = [h if c.numeric else min(h, max(c.label, 4, c.floor)) for c, h in zip(cols, high, strict=True)]
    kept = list(range(len(cols)))

    def need(mins: list[int]) -> int:
        return table_width(mins[i] for i in kept)

    for i in drop:
        if need(low) <= width:
            break
        if i in kept and len(kept) > 1:
            kept.remove(i)
    mins = low
    if need(low) > width:
        mins = floor
        while need(floor) > width and len(kept) > 1:
            gone = [i for i in kept[1:] if i not in keep]
            if not gone:
                break
            kept.remove(gone[-1])
    # grow the text columns from their minimum toward their maximum, the narrowest first
    widths = {i: mins[i] for i in kept}
    room = width - need(mins)
    while room > 0:
        growable = [i for i in kept if widths[i] < high[i]]
        if not growable:
            break
        i = min(growable, key=lambda j: (widths[j], j))
        widths[i] += 1
        room -= 1
    return [widths.get(i) for i in range(len(cols))]


def is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def fmt_us(value: Any) -> str:
    """Microseconds for people: 840 µs, 12.3 ms, 4.56 s, 2 min 5 s."""
    if is_missing(value):
        return "–"
    v = float(value)
    sign = "-" if v < 0 else ""
    v = abs(v)
    if v < 1000:
        text = f"{v:.0f} µs" if v >= 10 or v == int(v) else f"{v:.1f} µs"
    elif v < 1_000_000:
        text = f"{v / 1000:.3g} ms" if v < 100_000 else f"{v / 1000:.0f} ms"
    elif v < 60_000_000:
        text = f"{v / 1e6:.3g} s"
    else:
        minutes, seconds = divmod(v / 1e6, 60)
        text = f"{minutes:.0f} min {seconds:.0f} s"
    return sign + text


def fmt_share(value: Any) -> str:
    if is_missing(value):
        return "–"
    pct = float(value) * 100
    return f"{pct:.1f}%" if pct >= 0.1 or pct == 0 else "<0.1%"


def fmt_int(value: Any) -> str:
    if is_missing(value):
        return "–"
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return str(value)


def fmt_float(value: Any) -> str:
    if is_missing(value):
        return "–"
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    return f"{v:,.0f}" if v == int(v) else f"{v:,.1f}"


def fmt_ratio(value: Any) -> str:
    if is_missing(value):
        return "–"
    v = float(value)
    if math.isinf(v):
        return "new"
    return f"{v:.2f}×"


def fmt_bytes(value: Any) -> str:
    """Bytes for people: 512 B, 4.1 kB, 12.3 MB, 1.5 GB (powers of 1000); "–" where missing."""
    return "–" if is_missing(value) else human_bytes(value)


def fmt_names(value: Any) -> str:
    """A list of paths as their file names: "ckpt-1.pt, ckpt-2.pt"."""
    if value is None or isinstance(value, str):
        return "–" if not value else str(value)
    names = [str(v).replace("\\", "/").rsplit("/", 1)[-1] or str(v) for v in value if v is not None]
    return ", ".join(names) if names else "–"


def fmt_value(value: Any, kind: str) -> str:
    if kind == "names":
        return fmt_names(value)
    if kind == "us":
        return fmt_us(value)
    if kind == "share":
        return fmt_share(value)
    if kind == "bytes":
        return fmt_bytes(value)
    if kind == "int":
        return fmt_int(value)
    if kind == "float":
        return fmt_float(value)
    if kind == "ratio":
        return fmt_ratio(value)
    if kind == "id":
        return "–" if is_missing(value) or value == -1 else str(value)
    if kind == "part":  # a step part's key ("io") as the tables name it ("I/O")
        return dict(STEP_PARTS).get(value, "–" if is_missing(value) else str(value))
    if is_missing(value):
        return "–"
    if value == "":
        return "(none)"
    return str(value)


def frame_of(summary: Summary, attr: str) -> pl.DataFrame:
    return summary.table(attr)


def step_cols(summary: Summary) -> list[Col]:
    """The by_step columns worth showing: a part, `compiles` or `saved` that is empty in every row is left
    out, and so is an epoch column with no epoch (automatic steps)."""
    frame = frame_of(summary, "by_step")
    cols = []
    for col in present_cols(frame, SPEC_BY_ATTR["by_step"].cols):
        series = frame.get_column(col.key)
        if col.kind == "names":
            empty = series.null_count() == frame.height or not series.list.len().fill_null(0).sum()
        elif (col.key.endswith("_us") and col.key not in ("total_us", "op_us", "gpu_us", "gpu_idle_us")) or (
            col.key == "compiles"
        ):
            empty = not series.fill_null(0).sum()
        elif col.key == "epoch":
            empty = series.null_count() == frame.height
        else:
            empty = False
        if not empty:
            cols.append(col)
    return cols


def step_part_totals(summary: Summary) -> list[tuple[str, str, float]]:
    """(part, label, µs over all steps) for each part with time, from step_stats."""
    stats = frame_of(summary, "step_stats")
    if stats.height == 0 or not {"part", "total_us"} <= set(stats.columns):
        return []
    totals = dict(stats.select("part", "total_us").iter_rows())
    return [(p, label, float(totals.get(p) or 0)) for p, label in STEP_PARTS if totals.get(p)]


@dataclass(frozen=True)
class FileView:
    """What renderers show of by_file (analyze/files.py): `frame`, the program's files and the other
    single files with I/O outside compile phases, then one row per group (Python's imports, dynascope's
    own files, compiler caches, compiler pipes: each always shown, below every single file; a file with
    no path named "(no file name)"); the columns worth showing (`cols`: a count that is zero in every
    such row is left out); the single files touched only inside compile phases as one line's numbers;
    the headline's numbers: the program's files shown, and all but the pipes (whose blocking reads are
    waiting on compile workers, not file I/O)."""

    frame: pl.DataFrame
    cols: list[Col]
    compile_files: int
    compile_bytes_read: int
    compile_bytes_written: int
    compile_us: int
    compile_share: float
    program_files: int = 0
    program_bytes_read: int = 0
    program_bytes_written: int = 0
    program_us: int = 0
    other_files: int = 0  # every other file but the pipes (in groups or not, inside compile phases or not)
    other_us: int = 0
    pipes: int = 0
    pipes_us: int = 0
    pipes_outside: bool = False  # some pipe or socket was read outside compile phases: not only the compiler's


NO_FILE_NAME = "(no file name)"
_ALWAYS_SHOWN = ("fname", "total_us", "share", "reads", "bytes_read", "processes")
_SINGLE_FILES = ("program", "other")  # by_file's `group` of a row that is one file (analyze/files.py)


def file_view(summary: Summary, limit: int | None = None) -> FileView | None:
    """by_file split for display (FileView; its columns judged on the first `limit` rows, those shown);
    None when the trace has no file I/O events."""
    frame = frame_of(summary, "by_file")
    if frame.height == 0 or not {"fname", "events", "compile_events"} <= set(frame.columns):
        return None
    grouped = "group" in frame.columns and "files" in frame.columns
    single = pl.col("group").is_in(_SINGLE_FILES) if grouped else pl.lit(True)
    only_compile = single & (pl.col("compile_events") >= pl.col("events")) & (pl.col("events") > 0)
    inside = frame.filter(only_compile)
    shown = frame.filter(~only_compile).with_columns(pl.col("fname").fill_null(NO_FILE_NAME))
    cols = []
    head = shown if limit is None else shown.head(limit)
    for col in present_cols(shown, SPEC_BY_ATTR["by_file"].cols):
        if col.key in _ALWAYS_SHOWN or head.get_column(col.key).fill_null(0).sum():
            cols.append(col)

    def total(f: pl.DataFrame, c: str) -> int:
        return int(f.get_column(c).sum() or 0) if c in f.columns else 0

    program = shown.filter(pl.col("group") == "program") if grouped else shown
    pipes = frame.filter(pl.col("group") == "pipes") if grouped else frame.clear()
    rest = frame.filter(pl.col("group") != "pipes") if grouped else frame
    files = total(rest, "files") if grouped else rest.height
    return FileView(
        frame=shown,
        cols=cols,
        compile_files=inside.height,
        compile_bytes_read=total(inside, "bytes_read"),
        compile_bytes_written=total(inside, "bytes_written"),
        compile_us=total(inside, "total_us"),
        compile_share=float(inside.get_column("share").sum() or 0.0) if "share" in inside.columns else 0.0,
        program_files=program.height,
        program_bytes_read=total(program, "bytes_read"),
        program_bytes_written=total(program, "bytes_written"),
        program_us=total(program, "total_us"),
        other_files=files - program.height,
        other_us=total(rest, "total_us") - total(program, "total_us"),
        pipes=total(pipes, "files"),
        pipes_us=total(pipes, "total_us"),
        pipes_outside=total(pipes, "compile_events") < total(pipes, "events"),
    )


def compile_files_line(view: FileView) -> str | None:
    """One line for the single files touched only inside compile phases, or None when there are none."""
    n = view.compile_files
    if not n:
        return None
    moved = [f"{fmt_bytes(view.compile_bytes_read)} read"]
    if view.compile_bytes_written:
        moved.append(f"{fmt_bytes(view.compile_bytes_written)} written")
    return (
        f"{n:,} more file{'s' if n != 1 else ''} touched only while compiling: "
        f"{', '.join(moved)}, {fmt_us(view.compile_us)} ({fmt_share(view.compile_share)} of the file I/O time)"
    )


def _files(n: int, what: str = "file") -> str:
    return f"{n:,} {what}{'s' if n != 1 else ''}"


def io_line(view: FileView) -> str:
    """The headline on file I/O: the program's files (those in the table, outside compile phases) first,
    bytes read and written and time, then the time in all files (Python's imports, caches, ... too); on a
    second line, where there are any, the compiler pipes' waiting, said to be left out of the I/O time."""
    if view.program_files:
        line = (
            f"I/O: {_files(view.program_files, 'program file')}, {fmt_bytes(view.program_bytes_read)} read, "
            f"{fmt_bytes(view.program_bytes_written)} written, {fmt_us(view.program_us)}"
        )
    else:
        line = "I/O: no program files"
    if view.other_files:
        line += f" (all {_files(view.program_files + view.other_files)}: {fmt_us(view.program_us + view.other_us)})"
    if view.pipes:
        n = view.pipes
        what = (f"{n:,} pipe{'s' if n != 1 else ''} or socket{'s' if n != 1 else ''}" if view.pipes_outside
                else _files(n, "compiler pipe"))  # fmt: skip
        line += f"\n  not counted as I/O: {fmt_us(view.pipes_us)} waiting on {what}"
    return line


def present_cols(frame: pl.DataFrame, cols: Iterable[Col]) -> list[Col]:
    return [c for c in cols if c.key in frame.columns]


def table_rows(
    summary: Summary, spec: TableSpec, limit: int | None = None, frame: pl.DataFrame | None = None
) -> tuple[list[Col], list[dict], int]:
    """(columns present, row dicts (possibly cut to `limit`), total row count) of the table, or of `frame`
    (rows of it) when given."""
    frame = frame_of(summary, spec.attr) if frame is None else frame
    cols = present_cols(frame, spec.cols)
    n = frame.height
    if limit is not None and n > limit:
        frame = frame.head(limit)
    keys = [c.key for c in cols]
    rows = frame.select(keys).to_dicts() if keys else []
    return cols, rows, n


def only_kernels(summary: Summary) -> bool:
    """Whether every op event is an inductor kernel: the per-kernel table then says all the per-op one
    would (and more), so renderers show it instead."""
    kernels = frame_of(summary, "by_kernel")
    if kernels.height == 0 or "count" not in kernels.columns:
        return False
    return int(kernels.get_column("count").sum() or 0) >= int(summary.meta.get("ops") or 0)


def op_tables(summary: Summary) -> list[str]:
    """The per-op tables to show, in order: ops, inductor kernels, or both."""
    kernels = frame_of(summary, "by_kernel").height > 0
    return ["by_kernel"] if only_kernels(summary) else ["by_op", "by_kernel"] if kernels else ["by_op"]


def summary_top(summary: Summary, default: int = 20) -> int:
    return summary.top if summary.top > 0 else default


def meta_facts(summary: Summary) -> list[tuple[str, str]]:
    """(label, text) pairs for a header: files, events, ops, span, processes, dropped lines."""
    meta = summary.meta
    facts: list[tuple[str, str]] = []
    if "files" in meta:
        facts.append(("files", fmt_int(len(meta["files"]))))
    if meta.get("events") is not None:
        facts.append(("events", fmt_int(meta["events"])))
    if meta.get("ops") is not None:
        facts.append(("op events", fmt_int(meta["ops"])))
    if meta.get("span_us") is not None:
        facts.append(("span", fmt_us(meta["span_us"])))
    procs = frame_of(summary, "by_process").height
    if procs:
        facts.append(("processes", fmt_int(procs)))
    if meta.get("dropped_lines"):
        facts.append(("skipped lines", fmt_int(meta["dropped_lines"])))
    return facts


def meta_files(summary: Summary) -> list[str]:
    return [str(f) for f in summary.meta.get("files", [])]


def meta_warnings(summary: Summary) -> list[str]:
    return [str(w) for w in summary.meta.get("warnings", [])]


def phase_totals(summary: Summary) -> dict[str, float]:
    frame = frame_of(summary, "by_phase")
    if not {"phase", "total_us"} <= set(frame.columns):
        return {}
    out: dict[str, float] = {}
    for row in frame.select("phase", "total_us").iter_rows():
        if row[0] is not None and row[1] is not None:
            out[str(row[0])] = out.get(str(row[0]), 0.0) + float(row[1])
    return out


def compile_run_totals(summary: Summary) -> tuple[float, float]:
    """(compile µs, run µs) from compile_vs_run."""
    frame = frame_of(summary, "compile_vs_run")
    if not {"kind", "total_us"} <= set(frame.columns):
        return 0.0, 0.0
    compile_us = run_us = 0.0
    for kind, total in frame.select("kind", "total_us").iter_rows():
        if total is None:
            continue
        if kind == "compile":
            compile_us += float(total)
        elif kind == "run":
            run_us += float(total)
    return compile_us, run_us
