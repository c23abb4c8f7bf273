"""GPU time in the summaries: device events ("gpu", trace/launches.py) summed per op, layer and kernel,
per device and stream, and the GPU's busy time within each step (the rest of the step it waited).

A device event's `launcher` names the op (or inductor kernel) event that launched it, and its OH reference
gives that op's layer, phase, graph and compile id; an activity launched outside every traced op (eager
code between graphs, torch's own copies) has no launcher and counts only per device and per step.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from dynascope.analyze.read.columns import AUTOGRAD_CAT, DATA_CAT, DEVICE_PAUSED, GPU_CAT, OPTIMIZER_CAT, TORCH_IO_CAT
from dynascope.analyze.stepparts import interval_union

# `part`: for an activity no traced op launched, the training-step event its launch fell in (launched_in)
GPU_KEYS = ["launcher", "layer", "module_type", "phase", "compile_id", "graph", "device", "stream", "activity", "part"]
STEP_PART_CATS = [DATA_CAT, AUTOGRAD_CAT, OPTIMIZER_CAT, TORCH_IO_CAT]
BY_OPS = "traced ops and kernels"
ELSEWHERE = "elsewhere (the program's own eager code, torch's)"
GPU_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    **dict.fromkeys(GPU_KEYS, pl.String), "device": pl.Int64, "stream": pl.Int64, "n": pl.Int64, "total_us": pl.Int64,
}  # fmt: skip


def gpu_rows(others: pl.DataFrame) -> pl.DataFrame:
    return others.filter((pl.col("cat").cast(pl.String) == GPU_CAT).fill_null(False))


def gpu_partial(others: pl.DataFrame) -> pl.DataFrame:
    """Device time summed per launcher, attribution, device, stream, kind and step part (mergeable)."""
    rows = gpu_rows(others)
    if rows.height == 0:
        return pl.DataFrame(schema=GPU_SCHEMA)
    rows = rows.with_columns(launched_in(rows, others))
    out = rows.group_by(GPU_KEYS).agg(pl.len().cast(pl.Int64).alias("n"), pl.col("dur").sum().alias("total_us"))
    return out.select([pl.col(c).cast(t, strict=False) for c, t in GPU_SCHEMA.items()])


def launched_in(rows: pl.DataFrame, others: pl.DataFrame) -> pl.Series:
    """`part`: for each device row that no traced op launched, the name of the training-step event
    (optimizer.step, backward, dataloader.next, torch.save, ...) that was open on its launching thread at
    its launch: the latest one begun by then, if it had not ended; else null."""
    none = pl.Series("part", [None] * rows.height, dtype=pl.String)
    needed = {"ltid", "launch", "launcher"}
    if not needed <= set(rows.columns):
        return none
    parts = others.filter(pl.col("cat").cast(pl.String).is_in(STEP_PART_CATS) & pl.col("dur").is_not_null())
    if parts.height == 0:
        return none
    parts = parts.select(
        pl.col("pid").cast(pl.Int64), pl.col("tid").cast(pl.Int64), pl.col("ts").cast(pl.Int64).alias("at"),
        (pl.col("ts") + pl.col("dur")).cast(pl.Int64).alias("until"), pl.col("name").cast(pl.String).alias("part"),
    ).sort("at")
    launches = rows.select(
        pl.int_range(pl.len()).alias("row"), pl.col("pid").cast(pl.Int64), pl.col("ltid").cast(pl.Int64).alias("tid"),
        pl.col("launch").cast(pl.Int64).alias("at"), pl.col("launcher").is_null().alias("unlaunched"),
    ).filter(pl.col("unlaunched") & pl.col("at").is_not_null()).sort("at")
    found = launches.join_asof(parts, on="at", by=["pid", "tid"], strategy="backward", check_sortedness=False)
    found = found.filter(pl.col("until") >= pl.col("at")).select("row", "part")
    out = pl.DataFrame({"row": range(rows.height)}).join(found, on="row", how="left").sort("row")
    return out.get_column("part").cast(pl.String)


def launchers(gpu: pl.DataFrame) -> pl.DataFrame:
    """launched_from, count, total_us, share: who launched the device's work. Traced ops and kernels,
    then the training-step events the rest was launched in, then what is left."""
    if gpu.height == 0:
        return pl.DataFrame()
    who = (
        pl.when(pl.col("launcher").is_not_null()).then(pl.lit(BY_OPS))
        .when(pl.col("part").is_not_null()).then(pl.col("part"))
        .otherwise(pl.lit(ELSEWHERE))
    )  # fmt: skip
    out = gpu.group_by(who.alias("launched_from")).agg(pl.col("n").sum().alias("count"), pl.col("total_us").sum())
    total = int(out.get_column("total_us").sum() or 0)
    order = pl.when(pl.col("launched_from") == BY_OPS).then(0).when(pl.col("launched_from") == ELSEWHERE).then(2)
    return (
        out.with_columns((pl.col("total_us") / total if total else pl.lit(0.0)).alias("share"))
        .sort([order.otherwise(1), "total_us"], descending=[False, True])
    )


def busy_in_windows(others: pl.DataFrame, windows: pl.DataFrame) -> np.ndarray:
    """Per step window: how long a device of the window's process was busy within it (µs, the union of
    its device events clipped to the window)."""
    out = np.zeros(windows.height, dtype=np.int64)
    rows = gpu_rows(others)
    if rows.height == 0 or windows.height == 0:
        return out
    for (pid,), events in rows.group_by(["pid"]):
        starts = events.get_column("ts").to_numpy().astype(np.int64)
        s, e = interval_union(starts, starts + events.get_column("dur").to_numpy().astype(np.int64))
        reach = np.concatenate([[0], np.cumsum(e - s)])
        mine = np.flatnonzero(windows.get_column("pid").to_numpy() == pid)
        a = windows.get_column("ts").to_numpy()[mine].astype(np.int64)
        b = a + windows.get_column("dur").to_numpy()[mine].astype(np.int64)
        out[mine] = _covered(s, e, reach, b) - _covered(s, e, reach, a)
    return out


def paused_in_windows(others: pl.DataFrame, windows: pl.DataFrame) -> np.ndarray:
    """Per step window: whether device activity was not collected for part of it (a profiler of the
    program's own ran then), so that its busy time is unknown."""
    out = np.zeros(windows.height, dtype=bool)
    paused = others.filter((pl.col("name").cast(pl.String) == DEVICE_PAUSED).fill_null(False))
    if paused.height == 0 or windows.height == 0:
        return out
    pids = windows.get_column("pid").to_numpy()
    a = windows.get_column("ts").to_numpy().astype(np.int64)
    b = a + windows.get_column("dur").to_numpy().astype(np.int64)
    for pid, ts, dur in paused.select("pid", "ts", "dur").iter_rows():
        out |= (pids == pid) & (a < ts + dur) & (b > ts)
    return out


def _covered(s: np.ndarray, e: np.ndarray, before: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Busy time in (-inf, t) for each t, over disjoint sorted intervals [s, e)."""
    i = np.searchsorted(s, t, side="right") - 1
    inside = np.where(i >= 0, np.minimum(t, e[np.maximum(i, 0)]) - s[np.maximum(i, 0)], 0)
    return np.where(i >= 0, before[np.maximum(i, 0)] + np.maximum(inside, 0), 0)


# -- finishing: the columns the tables gain ---------------------------------------------------------


def with_gpu_by_op(by_op: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    """by_op + gpu_us (the device time of what each op launched)."""
    launched = gpu.filter(pl.col("launcher").is_not_null())
    per = launched.group_by("launcher").agg(pl.col("total_us").sum().alias("gpu_us"))
    return _joined(by_op, per, ["name"], ["launcher"])


def with_gpu_by_layer(by_layer: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    per = gpu.filter(pl.col("launcher").is_not_null()).group_by(["layer", "module_type"]).agg(
        pl.col("total_us").sum().alias("gpu_us")
    )
    return _joined(by_layer, per, ["layer", "module_type"], ["layer", "module_type"])


def with_gpu_by_kernel(by_kernel: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    per = gpu.filter(pl.col("launcher").is_not_null()).group_by(["launcher", "compile_id", "graph", "phase"]).agg(
        pl.col("total_us").sum().alias("gpu_us")
    )
    keys = ["name", "compile_id", "graph", "phase"]
    return _joined(by_kernel, per, keys, ["launcher", "compile_id", "graph", "phase"])


def _joined(table: pl.DataFrame, per: pl.DataFrame, left: list[str], right: list[str]) -> pl.DataFrame:
    if table.height == 0 or per.height == 0 or not set(left) <= set(table.columns):
        return table
    per = per.with_columns(pl.col(c).cast(pl.String) for c in right)
    out = table.with_columns(pl.col(c).cast(pl.String).alias(f"__{c}") for c in left)
    out = out.join(per, left_on=[f"__{c}" for c in left], right_on=right, how="left", nulls_equal=True)
    return out.drop([f"__{c}" for c in left]).with_columns(pl.col("gpu_us").fill_null(0))


def by_device(gpu: pl.DataFrame) -> pl.DataFrame:
    """device, stream, activity, count, total_us, share (of all device time), launched (share of it that
    a traced op launched)."""
    if gpu.height == 0:
        return pl.DataFrame()
    out = (
        gpu.group_by(["device", "stream", "activity"])
        .agg(
            pl.col("n").sum().alias("count"),
            pl.col("total_us").sum(),
            pl.col("total_us").filter(pl.col("launcher").is_not_null()).sum().alias("launched_us"),
        )
        .sort(["device", "stream", "total_us"], descending=[False, False, True])
    )
    total = int(out.get_column("total_us").sum() or 0)
    return out.with_columns(
        (pl.col("total_us") / total if total else pl.lit(0.0)).alias("share"),
        (pl.col("launched_us") / pl.col("total_us")).fill_nan(0.0).alias("launched"),
    ).drop("launched_us")
