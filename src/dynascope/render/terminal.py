"""Summaries as rich tables in the terminal.

`render_summary` prints every table; `render_short` prints the compact end-of-run summary that
`dynascope demo` and `dynascope run` show (top ops, forward vs backward, compile vs run).
Both stay readable when piped: colour is dropped when the output is not a terminal, tables keep a
width wide enough for op names, and every cell is plain text (op names are never read as markup).
"""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..analyze.summary import Summary
from ..console import PIPE_WIDTH, make_console
from ._fmt import (
    SPEC_BY_ATTR,
    TableSpec,
    compile_run_totals,
    fmt_share,
    fmt_us,
    fmt_value,
    meta_facts,
    meta_warnings,
    op_tables,
    phase_totals,
    summary_top,
    table_rows,
)

__all__ = ["make_console", "render_short", "render_summary", "short_text", "summary_table", "summary_text"]



# text columns that would push the numbers off a 150-column terminal are cut with an ellipsis
_MAX_WIDTH = {"name": 48, "layer": 48, "graph": 48, "host": 48, "fused": 26, "layers": 20}


def _cell(value: Any, kind: str) -> Text:
    return Text(fmt_value(value, kind))


def summary_table(summary: Summary, spec: TableSpec, limit: int | None = None) -> Table | None:
    """One Summary table as a rich Table, or None when the frame is empty."""
    cols, rows, n = table_rows(summary, spec, limit)
    if not rows or not cols:
        return None
    title = spec.title
    if limit is not None and n > limit:
        title += f" ({'first' if spec.attr == 'by_step' else 'top'} {limit} of {n:,})"
    table = Table(title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in cols:
        numeric = col.kind != "text"
        table.add_column(
            col.label,
            justify="right" if numeric else "left",
            no_wrap=True,
            overflow="ellipsis" if not numeric else "fold",
            style=None if numeric else ("cyan" if col.key in ("name", "layer") else None),
            max_width=_MAX_WIDTH.get(col.key),
            min_width=len(col.label) if numeric else None,
        )
    for row in rows:
        table.add_row(*(_cell(row.get(c.key), c.kind) for c in cols))
    return table


def _header(summary: Summary) -> Text:
    facts = meta_facts(summary)
    text = Text()
    text.append("dynascope report", style="bold")
    if facts:
        text.append("  ")
        text.append("  ·  ".join(f"{label} {value}" for label, value in facts))
    return text


def _headline(summary: Summary) -> Text | None:
    """One line: compile vs run and forward vs backward shares."""
    parts: list[str] = []
    compile_us, run_us = compile_run_totals(summary)
    if compile_us or run_us:
        total = compile_us + run_us
        parts.append(f"compile {fmt_us(compile_us)} ({fmt_share(compile_us / total)}), run {fmt_us(run_us)}")
    phases = phase_totals(summary)
    ptotal = sum(phases.values())
    if ptotal:
        order = [p for p in ("forward", "backward", "inference") if p in phases] + sorted(
            p for p in phases if p not in ("forward", "backward", "inference")
        )
        parts.append(", ".join(f"{p} {fmt_us(phases[p])} ({fmt_share(phases[p] / ptotal)})" for p in order))
    if not parts:
        return None
    return Text("  |  ".join(parts))


def render_summary(summary: Summary, console: Console | None = None, top: int | None = None) -> None:
    """Print every non-empty table of `summary`: header, compile vs run, phases, ops, layers, graphs, steps,
    processes."""
    console = console or make_console()
    top = top or summary_top(summary)
    console.print(_header(summary))
    headline = _headline(summary)
    if headline is not None:
        console.print(headline)
    for warning in meta_warnings(summary):
        console.print(Text(f"warning: {warning}", style="yellow"))
    order = ("compile_vs_run", "by_phase", *op_tables(summary), "by_layer", "by_graph", "by_step", "by_process")
    printed = 0
    for attr in order:
        spec = SPEC_BY_ATTR[attr]
        table = summary_table(summary, spec, top if spec.limit_to_top else None)
        if table is not None:
            console.print()
            console.print(table)
            printed += 1
    if not printed:
        console.print("no events to summarise")


def render_short(summary: Summary, console: Console | None = None, top: int = 5) -> None:
    """The compact summary printed at the end of `dynascope demo` / `dynascope run`."""
    console = console or make_console()
    facts = meta_facts(summary)
    if facts:
        console.print(Text("  ·  ".join(f"{label} {value}" for label, value in facts)))
    headline = _headline(summary)
    if headline is not None:
        console.print(headline)
    for warning in meta_warnings(summary):
        console.print(Text(f"warning: {warning}", style="yellow"))
    attr = op_tables(summary)[0]
    spec = SPEC_BY_ATTR[attr]
    spec = TableSpec(spec.attr, spec.title, tuple(c for c in spec.cols if c.key not in ("cat", "kernel_kind")))
    table = summary_table(summary, spec, top)
    if table is not None:
        what = "inductor kernels" if attr == "by_kernel" else "ops"
        table.title = f"Top {min(top, table.row_count)} {what} by total time"
        console.print(table)
    else:
        console.print("no op events in the trace")


def _to_text(fn, summary: Summary, width: int, **kwargs) -> str:
    import io

    buf = io.StringIO()
    fn(summary, make_console(buf, width=width, color=False), **kwargs)
    return buf.getvalue()


def summary_text(summary: Summary, width: int = PIPE_WIDTH, top: int | None = None) -> str:
    """render_summary as plain text (no colour)."""
    return _to_text(render_summary, summary, width, top=top)


def short_text(summary: Summary, width: int = 110, top: int = 5) -> str:
    """render_short as plain text (no colour)."""
    return _to_text(render_short, summary, width, top=top)

