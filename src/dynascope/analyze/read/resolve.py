"""Resolve a file's rows through its metadata (`records.FileTables`), column by column, never copying the frame.

- `host` from `hhash` through HH (rows without `hhash`, such as op events, get the file's host when it
  has one HH record), `fname` from `fhash` through FH, and in `start` rows `cmd`/`exec` (SH) and `cwd` (FH);
- the attribution columns of the OH record each row's `op` refers to; an op event without `op` is op
  k = id - p_idx - 1 of its parent graph call, whose `op` names the graph (`op` is then filled in);
- `rank`, `world_size`, `local_rank`, `process_name` of the row's process;
- times as integer microseconds: a float start is rounded, and the duration is the rounded end minus
  the rounded start (so rounding never makes a child poke out of its parent).
"""

from __future__ import annotations

import polars as pl

from dynascope.analyze.read.columns import dict_columns_frame
from dynascope.analyze.read.records import FileTables
from dynascope.trace.format import GRAPH_CAT

__all__ = ["graph_refs", "index_table", "norm_hash", "normalize_times", "resolve"]


def normalize_times(frame: pl.DataFrame) -> pl.DataFrame:
    cols = frame.columns
    if "dur" not in cols:
        frame = frame.with_columns(pl.lit(0, dtype=pl.Int64).alias("dur"))
    if "ts" not in cols:
        return frame.with_columns(pl.col("dur").cast(pl.Float64, strict=False).round(0).cast(pl.Int64, strict=False))
    if frame.schema["ts"] == pl.Int64 and frame.schema["dur"] == pl.Int64:
        return frame
    ts = pl.col("ts").cast(pl.Float64, strict=False)
    start = ts.round(0)
    end = (ts + pl.col("dur").cast(pl.Float64, strict=False)).round(0)
    return frame.with_columns(
        start.cast(pl.Int64, strict=False).alias("ts"), (end - start).cast(pl.Int64, strict=False).alias("dur")
    )


def resolve(frame: pl.DataFrame, tables: FileTables, columns: list[str] | None) -> pl.DataFrame:
    """The columns `columns` asks for (None: all) that the file's metadata can add to its rows."""
    want = set(columns) if columns is not None else None
    if tables.oh_index and {"p_idx", "id", "cat"} <= set(frame.columns):
        frame = derive_op_refs(frame, tables)
    cols = set(frame.columns)
    if want is None or "host" in want:
        frame = _with_host(frame, tables, cols)
    if "fhash" in cols and (want is None or "fname" in want):
        frame = frame.with_columns(_map_hash("fhash", tables.files, frame).alias("fname"))
    for src, table, dst in (
        ("cmd_hash", tables.strings, "cmd"),
        ("exec_hash", tables.strings, "exec"),
        ("cwd", tables.files, "cwd"),
    ):
        if src in cols and table and (want is None or dst in want):
            frame = frame.with_columns(
                pl.coalesce(_map_hash(src, table, frame), pl.col(src).cast(pl.String)).alias(dst)
            )
    if "op" in cols and tables.oh:
        frame = _join_oh(frame, tables, want)
    if tables.proc:
        frame = _with_process_facts(frame, tables, want)
    return frame


def _with_host(frame: pl.DataFrame, tables: FileTables, cols: set) -> pl.DataFrame:
    single = set(tables.hosts.values())
    fallback = pl.lit(single.pop() if len(single) == 1 else None, dtype=pl.String)
    mapped = (
        _map_hash("hhash", tables.hosts, frame).cast(pl.String) if "hhash" in cols else pl.lit(None, dtype=pl.String)
    )
    if "host" in cols:  # a `host` arg (the start record has one)
        mapped = pl.coalesce(mapped, pl.col("host").cast(pl.String))
    if "hhash" in cols or "host" in cols or len(set(tables.hosts.values())) == 1:
        frame = frame.with_columns(pl.coalesce(mapped, fallback).cast(pl.Categorical).alias("host"))
    return frame


def _with_process_facts(frame: pl.DataFrame, tables: FileTables, want: set | None) -> pl.DataFrame:
    """Per-process facts from `start` and `process_name`, mapped by pid (no copy of the frame)."""
    keys = sorted({k for v in tables.proc.values() for k in v})
    if want is not None:
        keys = [k for k in keys if k in want]
    if not keys:
        return frame
    pids = [p for p in tables.proc if isinstance(p, int)]
    exprs = []
    for k in keys:
        vals = dict_columns_frame({k: [tables.proc[p].get(k) for p in pids]}).get_column(k)
        pid = pl.col("pid").cast(pl.Int64, strict=False)
        exprs.append(pid.replace_strict(pids, vals, default=None, return_dtype=vals.dtype).alias(k))
    return frame.with_columns(exprs)


def graph_refs(frame: pl.DataFrame) -> pl.DataFrame:
    """(pid, p_idx, __gop): each graph event's id (as its ops' p_idx) and its graph reference."""
    if not {"cat", "op", "id", "pid"} <= set(frame.columns):
        return pl.DataFrame(schema={"pid": pl.Int64, "p_idx": pl.Int64, "__gop": pl.String})
    # narrow first: a filter of the whole (many-chunk) frame would copy every column of it
    return frame.select(
        pl.col("pid").cast(pl.Int64),
        pl.col("id").cast(pl.Int64).alias("p_idx"),
        norm_hash("op", frame).alias("__gop"),
        ((pl.col("cat") == GRAPH_CAT) & pl.col("op").is_not_null()).alias("__is_graph"),
    ).filter("__is_graph").drop("__is_graph")


def index_table(tables: FileTables) -> pl.DataFrame:
    """(__gop, __k, __ref): the OH reference of op k of each graph."""
    keys = list(tables.oh_index)
    return pl.DataFrame(
        {"__gop": [k[0] for k in keys], "__k": [k[1] for k in keys], "__ref": list(tables.oh_index.values())},
        schema={"__gop": pl.String, "__k": pl.Int64, "__ref": pl.String},
    )


def derive_op_refs(frame: pl.DataFrame, tables: FileTables) -> pl.DataFrame:
    """Fill `op` of op events that carry no reference from their parent graph call (`op` becomes
    Categorical)."""
    if "op" not in frame.columns:
        frame = frame.with_columns(pl.lit(None, dtype=pl.String).alias("op"))
    op = norm_hash("op", frame)
    narrow = frame.select(
        pl.col("pid"), pl.col("p_idx"), pl.col("id"),
        pl.when((pl.col("cat") == GRAPH_CAT) & op.is_not_null()).then(op).alias("graph_op"),
        ((pl.col("cat") == "dynamo") & pl.col("op").is_null()).alias("needs_ref"),
    )  # fmt: skip
    ref = op_refs(narrow, tables)
    del narrow
    return frame.with_columns(pl.coalesce(op.cast(pl.Categorical), pl.lit(ref)).alias("op"))


def op_refs(narrow: pl.DataFrame, tables: FileTables) -> pl.Series:
    """The OH reference (Categorical, null where none) of each row of `narrow`: `pid`, `p_idx`, `id`,
    `graph_op` (a graph call's graph reference, else null), `needs_ref` (an op event without its own
    reference: it is op k = id - p_idx - 1 of the graph call whose id is its p_idx).

    The joins run on integer numbers of graphs and references, not on their hash text, so no string
    per row is made."""
    index = index_table(tables)
    gops = index.get_column("__gop").unique(maintain_order=True)
    refs = index.get_column("__ref").unique(maintain_order=True)

    def number(col: str, keys: pl.Series) -> pl.Expr:
        return pl.col(col).cast(pl.String).replace_strict(keys, range(len(keys)), default=None, return_dtype=pl.UInt32)

    graphs = narrow.select(
        pl.col("pid").cast(pl.Int64), pl.col("id").cast(pl.Int64).alias("p_idx"), number("graph_op", gops).alias("__g")
    ).filter(pl.col("__g").is_not_null())
    index = index.select(number("__gop", gops).alias("__g"), "__k", number("__ref", refs).alias("__r"))
    k = pl.when(pl.col("needs_ref") & pl.col("p_idx").is_not_null()).then(pl.col("id") - pl.col("p_idx") - 1)
    rows = narrow.select(pl.col("pid").cast(pl.Int64), pl.col("p_idx").cast(pl.Int64), k.cast(pl.Int64).alias("__k"))
    rows = rows.join(graphs, on=["pid", "p_idx"], how="left", maintain_order="left")
    rows = rows.join(index, on=["__g", "__k"], how="left", maintain_order="left")
    return refs.cast(pl.Categorical).gather(rows.get_column("__r")).alias("op")


def _join_oh(frame: pl.DataFrame, tables: FileTables, want: set | None) -> pl.DataFrame:
    """The OH attribution of each row's `op`, one column at a time (no copy of the frame)."""
    keys = list(tables.oh)
    attr_names: dict[str, None] = {}
    for attrs in tables.oh.values():
        attr_names.update(dict.fromkeys(attrs))
    names = [k for k in attr_names if want is None or k in want]
    if not names:
        return frame
    table = dict_columns_frame({k: [tables.oh[h].get(k) for h in keys] for k in names})
    opcol = frame.get_column("op")
    if opcol.dtype == pl.Categorical:
        key = pl.col("op")
        present = set(opcol.unique().drop_nulls().cast(pl.String).to_list())
    else:
        key = norm_hash("op", frame)
        present = set(frame.select(key.unique().drop_nulls()).to_series().to_list())
    use = [i for i, h in enumerate(keys) if h in present]
    old = [keys[i] for i in use]
    exprs = []
    for k in names:
        col = table.get_column(k)
        dt = pl.Categorical if col.dtype == pl.String else col.dtype
        new = col.gather(use).cast(dt) if use else pl.Series(k, [], dtype=dt)
        mapped = key.replace_strict(old, new, default=None, return_dtype=dt)
        if k in frame.columns:
            same = frame.schema[k] == dt
            mapped = (
                pl.coalesce(pl.col(k), mapped)
                if same
                else pl.coalesce(pl.col(k).cast(pl.String), mapped.cast(pl.String))
            )
        exprs.append(mapped.alias(k))
    return frame.with_columns(exprs)


def norm_hash(col: str, frame: pl.DataFrame) -> pl.Expr:
    """A hash column as the string key metadata tables use (ints in decimal, hex lower-case)."""
    if frame.schema[col].is_integer():
        return pl.col(col).cast(pl.String)
    return pl.col(col).cast(pl.String).str.to_lowercase()


def _map_hash(col: str, table: dict[str, str], frame: pl.DataFrame) -> pl.Expr:
    if not table:
        return pl.lit(None, dtype=pl.Categorical)
    if frame.schema[col] == pl.Categorical:
        uniq = frame.get_column(col).unique().drop_nulls().cast(pl.String).to_list()
        old = [u for u in uniq if u.lower() in table]
        new = [table[u.lower()] for u in old]
        return pl.col(col).replace_strict(old, new, default=None, return_dtype=pl.Categorical)
    return norm_hash(col, frame).replace_strict(table, default=None, return_dtype=pl.String).cast(pl.Categorical)
