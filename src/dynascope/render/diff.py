"""Two Summaries side by side: per op and per layer time and counts in A and B, delta, ratio.

`diff_tables(a, b)` returns {"by_op": frame, "by_layer": frame, "totals": frame}; each keyed frame has
`<key>, count_a, count_b, total_a_us, total_b_us, delta_us, ratio` sorted by |delta| (largest change
first). `ratio` is B/A: below 1 is faster, `inf` is new in B, 0 is gone in B.
"""

from __future__ import annotations

from typing import Any

import polars as pl
from rich.console import Console
from rich.table import Table
from rich.text import Text
from rich import box

from ._fmt import compile_run_totals, fmt_int, fmt_ratio, fmt_us, frame_of, phase_totals

__all__ = ["diff_tables", "render_diff", "diff_to_dict"]

KEYS = {"by_op": ["name"], "by_layer": ["layer"]}


def _totals(a: Any, b: Any) -> pl.DataFrame:
    rows = []

    def add(label: str, va: float, vb: float) -> None:
        if va or vb:
            rows.append({"what": label, "a_us": va, "b_us": vb, "delta_us": vb - va, "ratio": (vb / va) if va else float("inf")})

    op_a = float(frame_of(a, "by_op")["total_us"].sum()) if "total_us" in frame_of(a, "by_op").columns else 0.0
    op_b = float(frame_of(b, "by_op")["total_us"].sum()) if "total_us" in frame_of(b, "by_op").columns else 0.0
    add("op time", op_a, op_b)
    pa, pb = phase_totals(a), phase_totals(b)
    for phase in ["forward", "backward", "inference"] + sorted((set(pa) | set(pb)) - {"forward", "backward", "inference"}):
        add(phase, pa.get(phase, 0.0), pb.get(phase, 0.0))
    ca, ra = compile_run_totals(a)
    cb, rb = compile_run_totals(b)
    add("compile", ca, cb)
    add("run", ra, rb)
    return pl.DataFrame(rows, schema={"what": pl.String, "a_us": pl.Float64, "b_us": pl.Float64, "delta_us": pl.Float64, "ratio": pl.Float64})


def _normalize(frame: pl.DataFrame, key: str) -> pl.DataFrame:
    """analysis' diff columns (total_us_a, ratio null when A is 0) → ours (total_a_us, ratio inf / 1)."""
    f = frame.rename({"total_us_a": "total_a_us", "total_us_b": "total_b_us"}).with_columns(
        pl.col("count_a").fill_null(0).cast(pl.Int64),
        pl.col("count_b").fill_null(0).cast(pl.Int64),
        pl.col("total_a_us").fill_null(0).cast(pl.Float64),
        pl.col("total_b_us").fill_null(0).cast(pl.Float64),
    )
    return f.with_columns(
        (pl.col("total_b_us") - pl.col("total_a_us")).alias("delta_us"),
        pl.when(pl.col("total_a_us") > 0)
        .then(pl.col("total_b_us") / pl.col("total_a_us"))
        .when(pl.col("total_b_us") > 0)
        .then(float("inf"))
        .otherwise(1.0)
        .alias("ratio"),
    ).sort([pl.col("delta_us").abs(), pl.col(key).cast(pl.String)], descending=[True, False], nulls_last=True)


def diff_tables(a: Any, b: Any) -> dict[str, pl.DataFrame]:
    """Totals plus the per-op and per-layer comparison computed by dynascope.analyze.diff."""
    from ..analyze.diff import diff_summaries

    keyed = diff_summaries(a, b)
    return {"totals": _totals(a, b), **{attr: _normalize(keyed[attr], key) for attr, (key,) in KEYS.items()}}


def diff_to_dict(tables: dict[str, pl.DataFrame], a_label: str, b_label: str) -> dict:
    def clean(v: Any) -> Any:
        if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
            return None if v != v else "inf"
        return v

    return {"a": a_label, "b": b_label, **{k: [{c: clean(v) for c, v in row.items()} for row in f.to_dicts()] for k, f in tables.items()}}


def _delta_text(delta: float, ratio: float) -> Text:
    if abs(delta) < 0.5:
        return Text("=", style="dim")
    style = "red" if delta > 0 else "green"
    sign = "+" if delta > 0 else "-"
    return Text(f"{sign}{fmt_us(abs(delta))}", style=style)


def _verdict(ratio: float, count_a: int, count_b: int) -> Text:
    if count_a == 0 and count_b > 0:
        return Text("new in B", style="yellow")
    if count_b == 0 and count_a > 0:
        return Text("gone in B", style="yellow")
    if ratio < 0.95:
        return Text("faster", style="green")
    if ratio > 1.05:
        return Text("slower", style="red")
    return Text("same", style="dim")


def _keyed_table(title: str, key_label: str, frame: pl.DataFrame, key: str, top: int) -> Table:
    shown = frame.head(top)
    t = Table(title=f"{title} (largest {min(top, frame.height)} of {frame.height} changes)" if frame.height > top else title,
              title_justify="left", title_style="bold", box=box.SIMPLE_HEAD, pad_edge=False)
    t.add_column(key_label, style="cyan", no_wrap=True, overflow="ellipsis", max_width=60)
    for label in ("count A", "count B", "A", "B", "Δ", "B/A", ""):
        t.add_column(label, justify="right" if label else "left", no_wrap=True)
    for row in shown.iter_rows(named=True):
        name = row[key]
        t.add_row(
            Text("(none)" if name in (None, "") else str(name)),
            fmt_int(row["count_a"]),
            fmt_int(row["count_b"]),
            fmt_us(row["total_a_us"]) if row["count_a"] else "–",
            fmt_us(row["total_b_us"]) if row["count_b"] else "–",
            _delta_text(row["delta_us"], row["ratio"]),
            fmt_ratio(row["ratio"]),
            _verdict(row["ratio"], row["count_a"], row["count_b"]),
        )
    return t


def render_diff(tables: dict[str, pl.DataFrame], a_label: str, b_label: str, console: Console, top: int = 20) -> None:
    console.print(Text.assemble(("dynascope diff", "bold"), f"  A = {a_label}  ·  B = {b_label}"))
    totals = tables["totals"]
    if totals.height:
        t = Table(title="Totals", title_justify="left", title_style="bold", box=box.SIMPLE_HEAD, pad_edge=False)
        for label in ("", "A", "B", "Δ", "B/A"):
            t.add_column(label, justify="left" if not label else "right", no_wrap=True)
        for row in totals.iter_rows(named=True):
            t.add_row(row["what"], fmt_us(row["a_us"]), fmt_us(row["b_us"]), _delta_text(row["delta_us"], row["ratio"]), fmt_ratio(row["ratio"]))
        console.print()
        console.print(t)
    for attr, title, key_label, key in (("by_op", "Ops", "op", "name"), ("by_layer", "Layers", "layer", "layer")):
        frame = tables[attr]
        if frame.height:
            console.print()
            console.print(_keyed_table(title, key_label, frame, key, top))
    op = tables["by_op"]
    if op.height:
        faster = op.filter(pl.col("delta_us") < 0).sort("delta_us").head(3)
        slower = op.filter(pl.col("delta_us") > 0).sort("delta_us", descending=True).head(3)
        if faster.height:
            console.print(Text("faster in B: " + ", ".join(f"{r['name']} ({fmt_us(-r['delta_us'])} less)" for r in faster.iter_rows(named=True)), style="green"))
        if slower.height:
            console.print(Text("slower in B: " + ", ".join(f"{r['name']} ({fmt_us(r['delta_us'])} more)" for r in slower.iter_rows(named=True)), style="red"))
