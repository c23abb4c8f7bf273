"""Compare two summaries: per op, per layer and per phase, count and time in A and B, what changed most.

The one ratio rule (every table, every renderer): `ratio` = B / A when A > 0, else null (new in B,
or in neither). An op gone from B has ratio 0.
"""

from __future__ import annotations

import polars as pl

from dynascope.analyze.summary import Summary

__all__ = ["diff_summaries"]

_SPECS = {
    "by_op": ["name", "cat"],
    "by_layer": ["layer", "module_type"],
    "by_phase": ["phase"],
}
_PHASES = ("forward", "backward", "inference")


def _ratio_expr(a: str, b: str) -> pl.Expr:
    return pl.when(pl.col(a) > 0).then(pl.col(b) / pl.col(a)).otherwise(None).alias("ratio")


def _keyed(a: pl.DataFrame, b: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    def side(df: pl.DataFrame, tag: str) -> pl.DataFrame:
        cols = [c for c in keys if c in df.columns]
        if df.height == 0 or len(cols) != len(keys):
            schema = dict.fromkeys(keys, pl.String) | {f"count_{tag}": pl.Int64, f"total_us_{tag}": pl.Int64}
            return pl.DataFrame(schema=schema)
        return df.select(
            [pl.col(k).cast(pl.String) for k in keys]
            + [
                pl.col("count").cast(pl.Int64).alias(f"count_{tag}"),
                pl.col("total_us").cast(pl.Int64).alias(f"total_us_{tag}"),
            ]
        )

    j = side(a, "a").join(side(b, "b"), on=keys, how="full", coalesce=True, nulls_equal=True)
    j = j.with_columns(
        [pl.col(c).fill_null(0) for c in ("count_a", "count_b", "total_us_a", "total_us_b")]
    ).with_columns(
        (pl.col("total_us_b") - pl.col("total_us_a")).alias("delta_us"),
        (pl.col("count_b") - pl.col("count_a")).alias("delta_count"),
        _ratio_expr("total_us_a", "total_us_b"),
    )
    return j.sort(
        [pl.col("delta_us").abs(), *keys], descending=[True] + [False] * len(keys), nulls_last=True
    ).select(*keys, "count_a", "count_b", "total_us_a", "total_us_b", "delta_us", "ratio", "delta_count")


def _column_sum(frame: pl.DataFrame, col: str, where: pl.Expr | None = None) -> int:
    if frame.height == 0 or col not in frame.columns:
        return 0
    if where is not None:
        frame = frame.filter(where)
    return int(frame.get_column(col).sum() or 0)


def _quantities(s: Summary) -> dict[str, int]:
    """Every total the diff compares, from the summary's tables (meta for counts and span)."""
    out = {"events": int(s.meta.get("events", 0) or 0), "ops": int(s.meta.get("ops", 0) or 0)}
    out["op_us"] = _column_sum(s.by_op, "total_us")
    phases = s.by_phase.get_column("phase").drop_nulls().to_list() if "phase" in s.by_phase.columns else []
    for phase in [*_PHASES, *sorted(set(phases) - set(_PHASES))]:
        out[f"{phase}_us"] = _column_sum(s.by_phase, "total_us", pl.col("phase") == phase)
    cvr = s.compile_vs_run
    out["compile_us"] = _column_sum(cvr, "total_us", pl.col("kind") == "compile") if "kind" in cvr.columns else 0
    out["run_us"] = _column_sum(cvr, "total_us", pl.col("kind") == "run") if "kind" in cvr.columns else 0
    out["span_us"] = int(s.meta.get("span_us", 0) or 0)
    return out


def diff_summaries(a: Summary, b: Summary) -> dict[str, pl.DataFrame]:
    """Per op, per layer and per phase: count_a, count_b, total_us_a, total_us_b, delta_us (B - A),
    ratio (see the module docstring), delta_count; sorted by |delta_us| descending, then keys.

    Also "totals": one row per quantity (events, ops, op_us, forward_us, backward_us, inference_us and
    any other phase's, compile_us, run_us, span_us) with a, b, delta, ratio.
    """
    out = {name: _keyed(getattr(a, name), getattr(b, name), keys) for name, keys in _SPECS.items()}
    qa, qb = _quantities(a), _quantities(b)
    names = list(dict.fromkeys([*qa, *qb]))
    rows = [{"quantity": q, "a": qa.get(q, 0), "b": qb.get(q, 0)} for q in names]
    out["totals"] = pl.DataFrame(rows, schema={"quantity": pl.String, "a": pl.Int64, "b": pl.Int64}).with_columns(
        (pl.col("b") - pl.col("a")).alias("delta"), _ratio_expr("a", "b")
    )
    return out
