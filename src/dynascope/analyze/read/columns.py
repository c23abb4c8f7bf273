"""The columns of a read trace and their types: one place for what is an integer, what a category."""

from __future__ import annotations

import orjson
import polars as pl

from dynascope.trace.format import (  # noqa: F401 - the categories, re-exported for the analyses
    AUTOGRAD_CAT,
    CALL_CAT,
    COMM_CAT,
    COMPILE_CAT,
    DATA_CAT,
    FRAME_CAT,
    GPU_CAT,
    GRAPH_CAT,
    MEMORY_CAT,
    OP_CAT,
    OPTIMIZER_CAT,
    POSIX_CAT,
    TORCH_IO_CAT,
)

__all__ = ["dict_columns_frame", "dtype_for", "empty_frame", "standard_types"]

INT_COLUMNS = {
    "id", "pid", "tid", "ts", "dur", "type", "p_idx", "level", "grad_enabled", "line", "epoch", "step",
    "image_idx", "image_size", "n_ops", "rank", "world_size", "local_rank", "ppid", "opt", "loader", "batch",
    "worker", "workers", "resume", "graphs", "breaks", "break_line", "break_at", "device", "stream", "ltid", "launch",
    "entry_line", "rss", "cuda_allocated", "cuda_reserved",
}  # fmt: skip
CAT_COLUMNS = {
    "trace_file", "name", "cat", "host", "hhash", "op", "kind", "compile_id", "graph", "phase", "node",
    "op_type", "target", "layer", "module_type", "file", "code", "backend", "tracer", "shapes", "dtypes",
    "launcher", "activity",
}  # fmt: skip
# event categories: op events, graph calls, compile phases, the whole step's automatic events (data
# loading, backward, optimizer, file I/O); any other cat but these is a user region
DEVICE_PAUSED = "device time paused"  # a stretch with no device activity collected (capture/device.py)
NON_REGION_CATS = [
    OP_CAT, GRAPH_CAT, COMPILE_CAT, "dftracer", "dynascope", DATA_CAT, AUTOGRAD_CAT, OPTIMIZER_CAT, TORCH_IO_CAT,
    POSIX_CAT, FRAME_CAT, CALL_CAT, GPU_CAT, MEMORY_CAT,
]  # fmt: skip

BASE_COLUMNS = ["trace_file", "name", "cat", "pid", "tid", "id", "ts", "dur"]


def dtype_for(col: str) -> pl.DataType:
    if col in INT_COLUMNS:
        return pl.Int64()
    if col in CAT_COLUMNS:
        return pl.Categorical()
    return pl.String()


def empty_frame(columns: list[str] | None = None) -> pl.DataFrame:
    cols = columns if columns is not None else BASE_COLUMNS
    return pl.DataFrame({c: pl.Series(c, [], dtype=dtype_for(c)) for c in cols})


def dict_columns_frame(data: dict[str, list]) -> pl.DataFrame:
    """A frame from Python columns of JSON values: ints, floats, bools, strings; anything nested as JSON text."""
    return pl.DataFrame([_series(k, values) for k, values in data.items()])


def _series(k: str, values: list) -> pl.Series:
    kinds = {type(v) for v in values if v is not None}
    if not kinds:
        return pl.Series(k, values, dtype=pl.String)
    if kinds <= {int}:
        try:
            return pl.Series(k, values, dtype=pl.Int64)
        except (OverflowError, pl.exceptions.PolarsError):
            return pl.Series(k, [None if v is None else str(v) for v in values], dtype=pl.String)
    if kinds <= {int, float}:
        return pl.Series(k, values, dtype=pl.Float64)
    if kinds <= {bool}:
        return pl.Series(k, values, dtype=pl.Boolean)
    if kinds <= {str}:
        return pl.Series(k, values, dtype=pl.String)
    text = [None if v is None else v if isinstance(v, str) else orjson.dumps(v).decode() for v in values]
    return pl.Series(k, text, dtype=pl.String)


def standard_types(frame: pl.DataFrame) -> pl.DataFrame:
    """Integer columns as Int64 (text that is all integers too), category columns as Categorical."""
    exprs = []
    for c, dt in frame.schema.items():
        if c in INT_COLUMNS and dt != pl.Int64:
            if dt.is_numeric() or dt == pl.Boolean:
                exprs.append(pl.col(c).cast(pl.Int64, strict=False))
            elif dt in (pl.String, pl.Categorical):
                as_int = frame.get_column(c).cast(pl.String).cast(pl.Int64, strict=False)
                if as_int.null_count() == frame.get_column(c).null_count():
                    exprs.append(pl.col(c).cast(pl.String).cast(pl.Int64, strict=False))
        elif c in CAT_COLUMNS and dt != pl.Categorical:
            exprs.append(pl.col(c).cast(pl.String).cast(pl.Categorical))
    return frame.with_columns(exprs) if exprs else frame
