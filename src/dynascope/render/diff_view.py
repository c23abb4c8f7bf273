"""Two Summaries side by side: per op and per layer time and counts in A and B, delta, ratio.

The numbers are `dynascope.analyze.summary_diff.diff_summaries`' (its one ratio rule: B/A, null when A is 0);
this module presents them. `diff_tables(a, b)` returns {"by_op": frame, "by_layer": frame, "totals":
frame}; each keyed frame has `<keys>, count_a, count_b, total_a_us, total_b_us, delta_us, ratio,
delta_count`, largest change first; "totals" has `what, a_us, b_us, delta_us, ratio` for op time, each
phase, compile and run (the ones that are not 0 in both).
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl
from rich.console import Console
from rich.text import Text

from dynascope.analyze.summary import Summary
from dynascope.analyze.summary_diff import diff_summaries
from dynascope.console import Prose
from dynascope.render._fmt import fmt_int, fmt_ratio, fmt_us
from dynascope.render._table import Column, FitTable, fit_table

__all__ = ["diff_tables", "diff_to_dict", "render_diff"]

_KEYED = ("by_op", "by_layer")
# totals shown, in order: the quantity in analyze's totals -> its label here
_TOTAL_LABELS = {"op_us": "op time", "compile_us": "compile", "run_us": "run"}
_NOT_SHOWN = {"events", "ops", "span_us"}


def _totals(totals: pl.DataFrame) -> pl.DataFrame:
    rows = []
    for q, va, vb, delta, ratio in totals.select("quantity", "a", "b", "delta", "ratio").iter_rows():
        if q in _NOT_SHOWN or not (va or vb):
            continue
        rows.append(
            {
                "what": _TOTAL_LABELS.get(q, q.removesuffix("_us")),
                "a_us": va,
                "b_us": vb,
                "delta_us": delta,
                "ratio": ratio,
            }
        )
    order = {label: i for i, label in enumerate(["op time", "forward", "backward", "inference"])}
    rows.sort(key=lambda r: (r["what"] in ("compile", "run"), order.get(r["what"], len(order)), r["what"] == "run"))
    return pl.DataFrame(
        rows,
        schema={"what": pl.String, "a_us": pl.Float64, "b_us": pl.Float64, "delta_us": pl.Float64, "ratio": pl.Float64},
    )


def diff_tables(a: Summary, b: Summary) -> dict[str, pl.DataFrame]:
    """Totals plus the per-op and per-layer comparison computed by dynascope.analyze.summary_diff."""
    computed = diff_summaries(a, b)
    keyed = {attr: computed[attr].rename({"total_us_a": "total_a_us", "total_us_b": "total_b_us"}) for attr in _KEYED}
    return {"totals": _totals(computed["totals"]), **keyed}


def diff_to_dict(tables: dict[str, pl.DataFrame], a_label: str, b_label: str) -> dict:
    def clean(v: Any) -> Any:
        return None if isinstance(v, float) and math.isnan(v) else v  # NaN: no JSON

    return {
        "a": a_label,
        "b": b_label,
        **{k: [{c: clean(v) for c, v in row.items()} for row in f.to_dicts()] for k, f in tables.items()},
    }


def _delta_text(delta: float) -> Text:
    if abs(delta) < 0.5:
        return Text("=", style="dim")
    style = "red" if delta > 0 else "green"
    sign = "+" if delta > 0 else "-"
    return Text(f"{sign}{fmt_us(abs(delta))}", style=style)


def _ratio_text(ratio: float | None, b_us: float) -> str:
    return "new" if ratio is None and b_us else fmt_ratio(ratio)


def _verdict(ratio: float | None, count_a: int, count_b: int) -> Text:
    if count_a == 0 and count_b > 0:
        return Text("new in B", style="yellow")
    if count_b == 0 and count_a > 0:
        return Text("gone in B", style="yellow")
    if ratio is None:  # A took no time
        return Text("same", style="dim")
    if ratio < 0.95:
        return Text("faster", style="green")
    if ratio > 1.05:
        return Text("slower", style="red")
    return Text("same", style="dim")


def _keyed_table(title: str, key_label: str, frame: pl.DataFrame, key: str, top: int) -> FitTable:
    """Per op or layer, fitted to the width it is printed at (render/_table.py); a narrow terminal leaves
    out, first to last: count A, count B, the verdict (B/A says it too)."""
    shown = frame.head(top)
    columns = [Column(key_label, numeric=False, min_width=28, max_width=60, style="cyan")]
    columns += [Column(label, numeric=True) for label in ("count A", "count B", "A", "B", "Δ", "B/A")]
    columns.append(Column("verdict", numeric=False))
    t = fit_table(f"{title} (largest {min(top, frame.height)} of {frame.height} changes)" if frame.height > top
                  else title, columns, drop=(1, 2, 7))  # fmt: skip
    for row in shown.iter_rows(named=True):
        name = row[key]
        t.add_row(
            Text("(none)" if name in (None, "") else str(name)),
            fmt_int(row["count_a"]),
            fmt_int(row["count_b"]),
            fmt_us(row["total_a_us"]) if row["count_a"] else "–",
            fmt_us(row["total_b_us"]) if row["count_b"] else "–",
            _delta_text(row["delta_us"]),
            _ratio_text(row["ratio"], row["total_b_us"]),
            _verdict(row["ratio"], row["count_a"], row["count_b"]),
        )
    return t


def render_diff(tables: dict[str, pl.DataFrame], a_label: str, b_label: str, console: Console, top: int = 20) -> None:
    console.print(Text.assemble(("dynascope diff", "bold"), f"  A = {a_label}  ·  B = {b_label}"))
    totals = tables["totals"]
    if totals.height:
        numbers = (Column(label, numeric=True) for label in ("A", "B", "Δ", "B/A"))
        t = fit_table("Totals", [Column("", numeric=False), *numbers])
        for row in totals.iter_rows(named=True):
            t.add_row(
                row["what"],
                fmt_us(row["a_us"]),
                fmt_us(row["b_us"]),
                _delta_text(row["delta_us"]),
                _ratio_text(row["ratio"], row["b_us"]),
            )
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
            console.print(
                Prose(
                    "faster in B: "
                    + ", ".join(f"{r['name']} ({fmt_us(-r['delta_us'])} less)" for r in faster.iter_rows(named=True)),
                    style="green",
                )
            )
        if slower.height:
            console.print(
                Prose(
                    "slower in B: "
                    + ", ".join(f"{r['name']} ({fmt_us(r['delta_us'])} more)" for r in slower.iter_rows(named=True)),
                    style="red",
                )
            )
