"""The terminal's table builders, shared by terminal.py and terminal_ranks.py: one Summary table fitted to
the console's width (render/_table.py), and its cells as plain text."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rich.text import Text

from dynascope.analyze.summary import Summary
from dynascope.render._fmt import fmt_value, frame_of, table_rows
from dynascope.render._table import NUMERIC_KINDS, Column, FitTable, fit_table
from dynascope.render.table_specs import Col, TableSpec

__all__ = ["cell", "spec_table", "summary_table"]


def cell(value: Any, kind: str) -> Text:
    return Text(fmt_value(value, kind))


def spec_table(title: str, cols: list[Col], spec: TableSpec | None, styles: dict[str, str] | None = None,
               cut_start: tuple[str, ...] = ()) -> FitTable:  # fmt: skip
    """An empty FitTable of `cols`, leaving columns out (at a narrow width) in `spec.drop`'s order."""
    keys = [c.key for c in cols]
    drop = [keys.index(k) for k in (spec.drop if spec is not None else ()) if k in keys]
    styles = styles or {}
    columns = [Column.of(c, styles.get(c.key), c.key in cut_start) for c in cols]
    return fit_table(title, columns, drop)


def summary_table(summary: Summary, spec: TableSpec, limit: int | None = None) -> FitTable | None:
    """One Summary table, fitted to the width it is printed at (render/_table.py), or None when the frame
    is empty."""
    cols, rows, n = table_rows(summary, spec, limit)
    if not rows or not cols:
        return None
    title = spec.title
    if limit is not None and n > limit:
        title += f" ({'first' if spec.attr == 'by_step' else 'top'} {limit} of {n:,})"
    if spec.attr == "by_kernel" and _add_kernel_calls(summary, cols, rows, limit):
        cols = [*cols, Col("call", "call", min_width=12, max_width=40)]
        spec = replace(spec, drop=("call", *spec.drop))  # kept where it tells rows apart (FitTable.widths)
    # a layer is a module path: cut at its start, its last names kept ("…h.0.attn.c_attn")
    table = spec_table(title, cols, spec, {"name": "cyan", "layer": "cyan"}, cut_start=("layer", "layers"))
    for row in rows:
        table.add_row(*(cell(row.get(c.key), c.kind) for c in cols))
    return table


def _add_kernel_calls(summary: Summary, cols: list[Col], rows: list[dict], limit: int | None) -> bool:
    """Where two kernel rows read the same in every text column (two `extern_kernels.mm` of one layer's
    backward: the gradients of its input and of its weight), each row's `call`: the arguments of the
    wrapper's call that launches it ("(buf3, primals_6, out=buf4)", from the trace's kernel source), the
    part that tells them apart. False (rows unchanged) where no rows read alike or the trace has no code."""
    frame = frame_of(summary, "by_kernel")
    if "kernel_code" not in frame.columns or not summary.sources:
        return False
    text = [c.key for c in cols if c.kind not in NUMERIC_KINDS]
    seen: dict[tuple, int] = {}
    for row in rows:
        key = tuple(str(row.get(k)) for k in text)
        seen[key] = seen.get(key, 0) + 1
    if all(n == 1 for n in seen.values()):
        return False
    codes = frame.get_column("kernel_code").to_list()[: len(rows)]
    for row, code in zip(rows, codes, strict=True):
        source = str(summary.sources.get(str(code or ""), "")).strip()
        name = str(row.get("name") or "")
        at = source.find(f"{name}(") if name else -1
        if "\n" in source or not source:
            row["call"] = "–"  # a generated kernel's source: its name tells it apart
        else:
            row["call"] = source[at + len(name) :] if at >= 0 else source
    return True
