"""Per-file I/O: which files a program opened, read and wrote, how much, how long, in which processes
(docs/trace-format.md, "Files read and written"). Pure polars.

The events are the `POSIX` ones (Python file objects: open, read, write, close; pydftracer's C core
writes the same cat with more names) and the `torch.io` ones (`torch.save`, `torch.load`), each naming
its file through `fhash` (the reader's `fname` column). Per (file) the partial table holds integer sums,
so partials of disjoint sets of processes merge by adding:

- `events`, `opens`, `reads`, `writes`, `saves`, `loads`: event counts (`opens`: open events, with
  pydftracer's open64/openat/creat; `reads`/`writes`: read/write events, with pread/readv/... ; each is
  one system call, a 0-byte read at the end of a file included);
- `bytes_read`, `bytes_written`: the `ret` of read/write events (-1, an error, counts 0), plus the
  `bytes` of each `torch.load` / `torch.save` that has no read / write of the same file on its thread
  starting inside it (`torch.save(obj, path)` writes from C++, which Python file events do not see; a
  `torch.load(path)` reads through Python's `open`, whose reads are counted once, not twice);
- `io_us` (POSIX events), `save_us`, `load_us`: the durations of those events, summed;
- `total_us`: the time in any of the file's events, per thread the union of their intervals (a read
  inside a `torch.load` of the same file is not counted twice), summed over threads;
- `compile_events`, `compile_us`: the same for the events that start inside a compile phase (a
  `dynamo.compile` event on the same thread): torch reads its own sources while inductor first compiles;
- `processes`: how many processes (pid of one trace file) have events on the file; `workers`: how many
  of them are DataLoader workers (processes with `dataloader.fetch` events).

A trace without POSIX or torch.io events costs one comparison here.
"""

from __future__ import annotations

import os

import numpy as np
import polars as pl

from dynascope.analyze.read.columns import COMPILE_CAT, DATA_CAT, POSIX_CAT, TORCH_IO_CAT

__all__ = ["BY_FILE_COLUMNS", "FILE_COUNTS", "FILE_SCHEMA", "GROUPS", "file_group", "file_table", "finish_files"]

IO_CATS = [POSIX_CAT, TORCH_IO_CAT]
# POSIX event names by what they do (dynascope writes open/read/write/close; pydftracer's C core the rest)
OPEN_NAMES = ["open", "open64", "openat", "openat64", "creat", "creat64"]
READ_NAMES = ["read", "pread", "pread64", "readv", "preadv", "preadv2"]
WRITE_NAMES = ["write", "pwrite", "pwrite64", "writev", "pwritev", "pwritev2"]
SAVE, LOAD = "torch.save", "torch.load"
WORKER_EVENT = "dataloader.fetch"

FILE_COUNTS = (
    "events", "opens", "reads", "bytes_read", "writes", "bytes_written", "io_us", "saves", "save_us", "loads",
    "load_us", "total_us", "compile_events", "compile_us", "processes", "workers",
)  # fmt: skip
FILE_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {"fname": pl.String, **dict.fromkeys(FILE_COUNTS, pl.Int64)}
_THREAD = ["trace_file", "pid", "tid"]


def _empty() -> pl.DataFrame:
    return pl.DataFrame(schema=FILE_SCHEMA)


def file_table(f: pl.DataFrame) -> pl.DataFrame:
    """The per-file sums (FILE_SCHEMA, one row per file path; null: events with no path) of the I/O events
    among the rows `f` (SUMMARY_COLUMNS; every event of each of its processes, op events aside)."""
    if not f.get_column("cat").is_in(IO_CATS).any():  # one pass: most traces have none
        return _empty()
    cat, name = pl.col("cat").cast(pl.String), pl.col("name").cast(pl.String)
    io = f.filter(cat.is_in(IO_CATS) & pl.col("ts").is_not_null()).select(
        pl.col("trace_file").cast(pl.String), pl.col("pid").fill_null(-1), pl.col("tid").fill_null(-1),
        pl.col("ts"), (pl.col("ts") + pl.col("dur").fill_null(0).clip(lower_bound=0)).alias("end"),
        pl.col("dur").fill_null(0).clip(lower_bound=0).alias("dur"), name.alias("name"),
        (cat == POSIX_CAT).alias("posix"), pl.col("fname").cast(pl.String), pl.col("ret"), pl.col("bytes"),
    )  # fmt: skip
    if io.height == 0:
        return _empty()
    posix, ev = pl.col("posix"), pl.col("name")
    is_read, is_write = posix & ev.is_in(READ_NAMES), posix & ev.is_in(WRITE_NAMES)
    is_save, is_load = ~posix & (ev == SAVE), ~posix & (ev == LOAD)
    io = io.with_columns(
        pl.when(is_read | is_load).then(pl.lit("r")).when(is_write | is_save).then(pl.lit("w")).alias("dir"),
        _in_compile(f, io),
        _is_worker(f, io),
    )
    io = io.with_columns(_torch_bytes_seen(io))
    moved = pl.col("ret").clip(lower_bound=0).fill_null(0)
    torch_bytes = pl.when(pl.col("seen")).then(0).otherwise(pl.col("bytes").clip(lower_bound=0).fill_null(0))
    proc = pl.struct("trace_file", "pid")
    sums = io.group_by("fname").agg(
        pl.len().alias("events"),
        (posix & ev.is_in(OPEN_NAMES)).sum().alias("opens"),
        is_read.sum().alias("reads"),
        (moved.filter(is_read).sum() + torch_bytes.filter(is_load).sum()).alias("bytes_read"),
        is_write.sum().alias("writes"),
        (moved.filter(is_write).sum() + torch_bytes.filter(is_save).sum()).alias("bytes_written"),
        pl.col("dur").filter(posix).sum().alias("io_us"),
        is_save.sum().alias("saves"),
        pl.col("dur").filter(is_save).sum().alias("save_us"),
        is_load.sum().alias("loads"),
        pl.col("dur").filter(is_load).sum().alias("load_us"),
        pl.col("compile").sum().alias("compile_events"),
        proc.n_unique().alias("processes"),
        proc.filter(pl.col("worker")).n_unique().alias("workers"),
    )
    keys = [*_THREAD, "fname"]
    total = _union_us(io, keys).group_by("fname").agg(pl.col("us").sum().alias("total_us"))
    in_compile = _union_us(io.filter(pl.col("compile")), keys).group_by("fname").agg(
        pl.col("us").sum().alias("compile_us")
    )
    out = sums.join(total, on="fname", how="left", nulls_equal=True).join(
        in_compile, on="fname", how="left", nulls_equal=True
    )
    return out.select(pl.col(c).fill_null(0).cast(t) if c != "fname" else pl.col(c) for c, t in FILE_SCHEMA.items())


def _in_compile(f: pl.DataFrame, io: pl.DataFrame) -> pl.Series:
    """Whether each I/O event starts inside a compile phase of its thread (a `dynamo.compile` event)."""
    c = f.filter(pl.col("cat").cast(pl.String) == COMPILE_CAT).filter(pl.col("ts").is_not_null())
    if c.height == 0:
        return pl.Series("compile", [False] * io.height, dtype=pl.Boolean)
    spans = _union(
        c.select(pl.col("trace_file").cast(pl.String), pl.col("pid").fill_null(-1), pl.col("tid").fill_null(-1),
                 pl.col("ts"), (pl.col("ts") + pl.col("dur").fill_null(0).clip(lower_bound=0)).alias("end")),
        _THREAD,
    ).sort("a")  # fmt: skip
    hit = (
        io.select(*_THREAD, "ts")
        .with_row_index("__row")
        .sort("ts")
        .join_asof(spans, left_on="ts", right_on="a", by=_THREAD, strategy="backward",
                   check_sortedness=False)  # sorted by ts here
        .sort("__row")
        .select((pl.col("b").is_not_null() & (pl.col("ts") < pl.col("b"))).alias("compile"))
    )
    return hit.get_column("compile")


def _is_worker(f: pl.DataFrame, io: pl.DataFrame) -> pl.Series:
    """Whether each I/O event's process is a DataLoader worker (it has `dataloader.fetch` events)."""
    fetch = (pl.col("cat").cast(pl.String) == DATA_CAT) & (pl.col("name").cast(pl.String) == WORKER_EVENT)
    workers = f.filter(fetch).select(pl.col("trace_file").cast(pl.String), pl.col("pid").fill_null(-1)).unique()
    if workers.height == 0:
        return pl.Series("worker", [False] * io.height, dtype=pl.Boolean)
    flag = io.select("trace_file", "pid").join(
        workers.with_columns(pl.lit(True).alias("worker")), on=["trace_file", "pid"], how="left", maintain_order="left"
    )
    return flag.get_column("worker").fill_null(False)


def _torch_bytes_seen(io: pl.DataFrame) -> pl.Series:
    """For each torch.save / torch.load event: whether a write / read of the same file on its thread starts
    inside it (its bytes are then already in the POSIX events' `ret`)."""
    keys = [*_THREAD, "fname", "dir"]
    raw = io.filter(pl.col("posix") & pl.col("dir").is_not_null() & pl.col("fname").is_not_null())
    calls = io.with_row_index("__row").filter(~pl.col("posix") & pl.col("dir").is_not_null())
    if raw.height == 0 or calls.height == 0:
        return pl.Series("seen", [False] * io.height, dtype=pl.Boolean)
    first = (
        calls.select("__row", *keys, "ts", "end")
        .sort("ts")
        .join_asof(raw.select(*keys, pl.col("ts").alias("raw_ts")).sort("raw_ts"), left_on="ts", right_on="raw_ts",
                   by=keys, strategy="forward", check_sortedness=False)
        .select("__row", (pl.col("raw_ts").is_not_null() & (pl.col("raw_ts") <= pl.col("end"))).alias("seen"))
    )  # fmt: skip
    seen = io.with_row_index("__row").select("__row").join(first, on="__row", how="left", maintain_order="left")
    return seen.get_column("seen").fill_null(False)


def _union(c: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Per `keys`: the union of the [ts, end) intervals as disjoint intervals [a, b)."""
    c = c.sort([*keys, "ts"], nulls_last=True)
    c = c.with_columns(pl.col("end").cum_max().shift(1).over(keys).alias("prev"))
    c = c.with_columns(
        (pl.col("prev").is_null() | (pl.col("ts") > pl.col("prev"))).cast(pl.Int64).cum_sum().over(keys).alias("seg")
    )
    return c.group_by([*keys, "seg"]).agg(pl.col("ts").min().alias("a"), pl.col("end").max().alias("b")).drop("seg")


def _union_us(c: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Per `keys`: the total length (`us`) of the union of the [ts, end) intervals (touching ones merged).

    Sorted once by keys and ts, then in numpy: each group's running end is a running maximum over the
    whole array, the groups lifted apart by group number x span (a few times faster than windows over the
    keys, for the millions of reads a data loader can make)."""
    if c.height == 0:
        return pl.DataFrame(schema={k: c.schema[k] for k in keys} | {"us": pl.Int64})
    c = c.sort([*keys, "ts"], nulls_last=True)
    new = c.select(pl.any_horizontal([pl.col(k).ne_missing(pl.col(k).shift(1)) for k in keys]).fill_null(True))
    first = new.to_series().to_numpy().copy()
    first[0] = True
    heads = np.flatnonzero(first)
    ts, end = c.get_column("ts").to_numpy(), c.get_column("end").to_numpy()
    lo = int(ts.min())
    span = int(end.max()) - lo + 1
    if len(heads) * span >= 1 << 62:  # too far apart to lift in int64: polars windows
        return _union(c, keys).group_by(keys).agg((pl.col("b") - pl.col("a")).sum().alias("us"))
    group = np.cumsum(first) - 1
    lift = group * span
    reach = np.maximum.accumulate(end - lo + lift) - lift  # the running end within each group
    starts = first.copy()
    starts[1:] |= ts[1:] - lo > reach[:-1]
    seg = np.flatnonzero(starts)
    us = np.zeros(len(heads), dtype=np.int64)
    np.add.at(us, group[seg], np.maximum.reduceat(end, seg) - ts[seg])
    return c[heads].select(keys).with_columns(pl.Series("us", us, dtype=pl.Int64))


# ----------------------------------------------------------------------------------------------
# the Summary table: the program's files first, the rest grouped
#
# A compiled training run touches thousands of files that are not the program's: Python's imports
# (every installed package's dist-info/entry_points.txt when torch lists its backends, torch's own
# sources while Dynamo traces), inductor's caches, dynascope's own package, and the pipes inductor's
# compile workers answer on (a blocking read there lasts as long as the worker compiles). Each of those
# kinds is one row of by_file, below every file of the program; the pipes' time is waiting, not file
# I/O, so it has no share and the headline leaves it out. A path is judged by itself (a trace holds no
# sys.prefix), so that another machine's trace groups the same.

PROGRAM, OTHER = "program", "other"  # one row per file: the program's own; system files
PYTHON, PACKAGES, DYNASCOPE, CACHE, PIPES = "python", "packages", "dynascope", "compiler cache", "pipes"  # a row each
GROUPS = (PYTHON, PACKAGES, DYNASCOPE, CACHE, PIPES)  # in this order when their times tie; PIPES always last
GROUP_LABELS = {  # short: a row's name in a table, "(label: N files)"
    PYTHON: "Python imports",
    PACKAGES: "installed packages' data",
    DYNASCOPE: "dynascope",
    CACHE: "compiler caches",
    PIPES: "compiler pipes",
}
_OTHER_PIPES = "pipes and sockets"  # the pipes' label when some were read outside compile phases

_OWN = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this checkout's or install's dynascope/
_OWN_DIRS = (_OWN + os.sep, os.path.join(os.path.dirname(_OWN), "dftracer") + os.sep)  # and the pydftracer shim
_PIPE_RE = r"^(pipe|socket|anon_inode):"  # what /proc/self/fd says of a descriptor that is no file
_DEMO_RE = r"/dynascope/demo/"  # the built-in demo is a program, though it lives in dynascope's package
_OWN_RE = (  # its package, its metadata, trace files (written untraced, but a copy or a read of one is seen)
    r"/(site|dist)-packages/(dynascope|dftracer)/|/dynascope(-[^/]*)?\.(dist|egg)-info/|/__editable__[^/]*dynascope"
    r"|\.pfw(\.gz)?$"
)
_CACHE_RE = r"/torchinductor_[^/]+/|/torchinductor/|/\.triton/|/triton/cache/|/torch_compile_cache/"
_META_RE = r"\.(dist|egg)-info(/|$)|\.egg-link$|/__pycache__/|\.py[co]$|/pyvenv\.cfg$"
_PACKAGES_RE = r"/(site|dist)-packages/"
_STDLIB_RE = r"/lib/python\d+(\.\d+)?t?/|/lib/python\d+\.zip(/|$)"
_CODE_RE = r"\.(py|pyi|pth)$"
_SYSTEM_RE = r"^/(proc|sys|dev|etc|usr|run)/"


def file_group(fname: pl.Expr) -> pl.Expr:
    """The row kind of each path (PROGRAM, OTHER, or one of GROUPS). A null path (a torch.save to a buffer,
    a descriptor /proc could not name) stays a row of its own (OTHER)."""
    own = pl.any_horizontal([fname.str.starts_with(d) for d in _OWN_DIRS]) | fname.str.contains(_OWN_RE)
    packages = fname.str.contains(_PACKAGES_RE)
    return (
        pl.when(fname.is_null()).then(pl.lit(OTHER))
        .when(fname.str.contains(_PIPE_RE)).then(pl.lit(PIPES))
        .when(fname.str.contains(_DEMO_RE)).then(pl.lit(PROGRAM))
        .when(own).then(pl.lit(DYNASCOPE))
        .when(fname.str.contains(_CACHE_RE)).then(pl.lit(CACHE))
        .when(fname.str.contains(_META_RE)).then(pl.lit(PYTHON))
        .when(packages & fname.str.contains(_CODE_RE)).then(pl.lit(PYTHON))
        .when(~packages & fname.str.contains(_STDLIB_RE)).then(pl.lit(PYTHON))
        .when(packages).then(pl.lit(PACKAGES))  # torch's templates and headers, a package's data files
        .when(fname.str.contains(_SYSTEM_RE)).then(pl.lit(OTHER))
        .otherwise(pl.lit(PROGRAM))
    )  # fmt: skip


BY_FILE_COLUMNS = (
    "fname", "group", "files", "total_us", "share", "opens", "reads", "bytes_read", "writes", "bytes_written",
    "io_us", "saves", "save_us", "loads", "load_us", "processes", "workers", "events", "compile_events", "compile_us",
)  # fmt: skip
BY_FILE_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    c: pl.String if c in ("fname", "group") else pl.Float64 if c == "share" else pl.Int64 for c in BY_FILE_COLUMNS
}
_SINGLE = (PROGRAM, OTHER)
_MAXED = ("processes", "workers")  # a group's: the most of any of its files (its processes are not additive)


def finish_files(table: pl.DataFrame) -> pl.DataFrame:
    """The Summary's by_file table from the merged per-file sums: one row per file of the program, then
    one per other file (system files), then one per group of the rest (GROUPS: its
    `fname` a label with the number of files, `files` that number), each part sorted by total_us
    (descending), then the path; the pipes last. Every count adds up to the same totals as the files'.
    `share`: of all rows' total_us but the pipes' (their waiting is not file I/O; their share is null)."""
    table = table.with_columns(file_group(pl.col("fname")).alias("group"), pl.lit(1, dtype=pl.Int64).alias("files"))
    single = table.filter(pl.col("group").is_in(_SINGLE))
    counts = [c for c in FILE_COUNTS if c not in _MAXED]
    grouped = (
        table.filter(~pl.col("group").is_in(_SINGLE))
        .group_by("group")
        .agg(pl.len().cast(pl.Int64).alias("files"), *(pl.col(c).sum() for c in counts),
             *(pl.col(c).max() for c in _MAXED))
    )  # fmt: skip
    labels = [_group_label(r) for r in grouped.iter_rows(named=True)]  # at most len(GROUPS) rows
    grouped = grouped.with_columns(pl.Series("fname", labels, dtype=pl.String))
    rank = {PROGRAM: 0, OTHER: 1, PIPES: 3}
    out = pl.concat([single.select(grouped.columns), grouped], how="vertical_relaxed").with_columns(
        pl.col("group").replace_strict(rank, default=2, return_dtype=pl.Int8).alias("__rank")
    )
    counted = pl.col("group") != PIPES
    total = pl.col("total_us").filter(counted).sum()
    share = pl.when(total > 0).then(pl.col("total_us") / total).otherwise(0.0)
    return (
        out.with_columns(pl.when(counted).then(share).otherwise(None).alias("share"))
        .sort(["__rank", "total_us", "events", "fname"], descending=[False, True, True, False], nulls_last=True)
        .select(pl.col(c).cast(t) for c, t in BY_FILE_SCHEMA.items())
    )


def _group_label(row: dict) -> str:
    """A group row's `fname`: "(what: N files)", the pipes' "(compiler pipes: N)"."""
    group, n = row["group"], row["files"]
    label = GROUP_LABELS.get(group, group)
    if group == PIPES and row["compile_events"] < row["events"]:
        label = _OTHER_PIPES
    return f"({label}: {n:,})" if group == PIPES else f"({label}: {n:,} file{'s' if n != 1 else ''})"
