"""Compare two summaries: per op and per layer, count and time in A and B, what changed most."""

from __future__ import annotations

import polars as pl

from .summary import Summary

__all__ = ["diff_summaries"]

_SPECS = {
    "by_op": ["name", "cat"],
    "by_layer": ["layer", "module_type"],
    "by_phase": ["phase"],
}


def _keyed(a: pl.DataFrame, b: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    def side(df: pl.DataFrame, tag: str) -> pl.DataFrame:
        cols = [c for c in keys if c in df.columns]
        if df.height == 0 or len(cols) != len(keys):
            schema = {k: pl.String for k in keys} | {f"count_{tag}": pl.Int64, f"total_us_{tag}": pl.Int64}
            return pl.DataFrame(schema=schema)
        return df.select(
            [pl.col(k).cast(pl.String) for k in keys]
            + [pl.col("count").cast(pl.Int64).alias(f"count_{tag}"), pl.col("total_us").cast(pl.Int64).alias(f"total_us_{tag}")]
        )

    j = side(a, "a").join(side(b, "b"), on=keys, how="full", coalesce=True, nulls_equal=True)
    j = j.with_columns(
        [pl.col(c).fill_null(0) for c in ("count_a", "count_b", "total_us_a", "total_us_b")]
    ).with_columns(
        (pl.col("total_us_b") - pl.col("total_us_a")).alias("delta_us"),
        (pl.col("count_b") - pl.col("count_a")).alias("delta_count"),
        pl.when(pl.col("total_us_a") > 0)
        .then(pl.col("total_us_b") / pl.col("total_us_a"))
        .otherwise(None)
        .alias("ratio"),
    )
    return j.sort(
        [pl.col("delta_us").abs(), *keys], descending=[True] + [False] * len(keys), nulls_last=True
    ).select(*keys, "count_a", "count_b", "total_us_a", "total_us_b", "delta_us", "ratio", "delta_count")


def diff_summaries(a: Summary, b: Summary) -> dict[str, pl.DataFrame]:
    """Per op, per layer and per phase: count_a, count_b, total_us_a, total_us_b, delta_us (B - A),
    ratio (B / A; null when A is 0), delta_count; sorted by |delta_us| descending, then keys.

    Also "totals": one row per quantity (events, ops, op_us, compile_us, run_us, span_us) with
    a, b, delta, ratio.
    """
    out = {name: _keyed(getattr(a, name), getattr(b, name), keys) for name, keys in _SPECS.items()}
    rows = []
    for q in ("events", "ops", "op_us", "compile_us", "run_us", "span_us"):
        if q == "op_us":
            va = int(a.by_op.get_column("total_us").sum() or 0) if a.by_op.height else 0
            vb = int(b.by_op.get_column("total_us").sum() or 0) if b.by_op.height else 0
        else:
            va, vb = int(a.meta.get(q, 0) or 0), int(b.meta.get(q, 0) or 0)
        rows.append({"quantity": q, "a": va, "b": vb, "delta": vb - va, "ratio": (vb / va) if va else None})
    out["totals"] = pl.DataFrame(
        rows, schema={"quantity": pl.String, "a": pl.Int64, "b": pl.Int64, "delta": pl.Int64, "ratio": pl.Float64}
    )
    return out
