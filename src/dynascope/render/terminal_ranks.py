"""Many ranks in the terminal (analyze/ranks.py, analyze/comm.py, docs/ranks.md): where the ranks diverge,
one row per rank, hangs, stragglers, communication and clocks."""

from __future__ import annotations

from dataclasses import replace

import polars as pl
from rich.console import Console

from dynascope.analyze.summary import Summary
from dynascope.console import Prose
from dynascope.render._fmt import fmt_share, fmt_us
from dynascope.render._table import FitTable
from dynascope.render.table_specs import RANK_SPEC, SPEC_BY_ATTR
from dynascope.render.terminal_tables import cell, spec_table, summary_table

__all__ = [
    "comm_line", "divergence_lines", "hang_text", "rank_table", "ranks_line", "render_collectives",
    "render_divergence", "render_hangs", "render_ranks", "straggler_lines",
]  # fmt: skip


def divergence_lines(summary: Summary, shown: int = 3) -> list[str]:
    """The first divergence between the ranks (and up to `shown` - 1 more): what, where, which ranks, the
    guard or line behind it, and whether it risks a hang. None where the ranks did alike."""
    frame = summary.table("divergence")
    if frame.height == 0 or "detail" not in frame.columns:
        return []
    lines = []
    for i, r in enumerate(frame.head(shown).iter_rows(named=True)):
        head = "Ranks diverge" if i == 0 else "  then"
        src = f" [{r['source']}]" if r.get("source") else ""
        risk = " (hang risk)" if r.get("hang_risk") else ""
        lines.append(f"{head}{risk}: {r['detail']}{src}")
    if frame.height > shown:
        lines.append(f"  and {frame.height - shown} more divergence{'s' if frame.height - shown > 1 else ''} "
                     "(--json: divergence)")  # fmt: skip
    return lines


def render_divergence(summary: Summary, console: Console) -> bool:
    lines = divergence_lines(summary)
    for line in lines:
        console.print(Prose(line, style="bold red" if line.startswith("Ranks") else "red"))
    return bool(lines)


def ranks_line(summary: Summary) -> str | None:
    """One line on the ranks: how many, the median step of the slowest and fastest, any trace not complete."""
    frame = summary.table("by_rank")
    if frame.height == 0 or "rank" not in frame.columns:
        return None
    text = f"Ranks: {frame.height}"
    medians = frame.filter(pl.col("step_median_us").is_not_null())
    if medians.height > 1:
        slow = medians.sort(["step_median_us", "rank"], descending=[True, False]).row(0, named=True)
        fast = medians.sort(["step_median_us", "rank"]).row(0, named=True)
        text += (f" · median step {fmt_us(fast['step_median_us'])} (rank {fast['rank']}) to "
                 f"{fmt_us(slow['step_median_us'])} (rank {slow['rank']})")  # fmt: skip
    bad = frame.filter(pl.col("status") != "complete")
    if bad.height:
        text += " · " + ", ".join(f"rank {r['rank']}: trace {r['status']}" for r in bad.iter_rows(named=True))
    return text


def rank_table(summary: Summary) -> FitTable | None:
    """One row per rank (analyze/ranks.by_rank); None without ranks."""
    frame = summary.table("by_rank")
    if frame.height == 0 or "rank" not in frame.columns:
        return None
    cols = [c for c in RANK_SPEC.cols if c.key in frame.columns]
    if frame.get_column("graph_breaks").null_count() == frame.height:
        cols = [c for c in cols if c.key != "graph_breaks"]
    table = spec_table(RANK_SPEC.title, cols, RANK_SPEC)
    for row in frame.iter_rows(named=True):
        table.add_row(*(cell(row.get(c.key), c.kind) for c in cols))
    return table


def render_ranks(summary: Summary, console: Console) -> bool:
    table = rank_table(summary)
    if table is None:
        return False
    console.print()
    console.print(table)
    line = ranks_line(summary)
    if line:
        console.print(Prose(line))
    return True


# ----------------------------------------------------------------------------------------------
# collectives across ranks (analyze/comm.py): hangs first, then stragglers, overlap and clocks


def hang_text(summary: Summary) -> list[str]:
    """The hang finding, one line per collective ranks were stopped waiting in: who waits, since when, who
    never issued it and where it was instead."""
    from dynascope.analyze.comm_job import hang_lines

    return [f"Hang: {line}" for line in hang_lines(summary.table("hangs"))]


def render_hangs(summary: Summary, console: Console) -> bool:
    lines = hang_text(summary)
    for line in lines:
        console.print(Prose(line, style="bold red"))
    return bool(lines)


def straggler_lines(summary: Summary, shown: int = 1) -> list[str]:
    """The worst stragglers: "Straggler: rank 1 issued step 2's collectives last, 503 ms late (all_reduce seq
    15): Python / untraced 500 ms"."""
    frame = summary.table("stragglers")
    out = []
    for r in frame.head(shown).iter_rows(named=True):
        where = (f"step {r['step']}'s collectives" if r["step"] is not None
                 else f"{r['op']} (pg {r['pg']}, seq {r['seq']})")  # fmt: skip
        doing = r["doing"] if r["doing_us"] <= 0 else f"{r['doing']} {fmt_us(r['doing_us'])}"
        out.append(f"Straggler: rank {r['rank']} issued {where} last, {fmt_us(r['late_us'])} late "
                   f"({r['op']} seq {r['seq']}); it was doing: {doing}")  # fmt: skip
    return out


def comm_line(summary: Summary) -> str | None:
    """One line on communication over the steps: collectives joined, in flight, hidden under compute, exposed."""
    c = summary.table("collectives")
    steps = summary.table("by_rank_step")
    if not steps.height or "comm_total_us" not in steps.columns:
        steps = summary.table("by_step")
    if c.height == 0 and "comm_total_us" not in steps.columns:
        return None
    text = f"Collectives: {c.height:,} joined across ranks"
    incomplete = c.filter(~pl.col("all_completed")).height if c.height else 0
    if incomplete:
        text += f" ({incomplete} not completed by every rank)"
    if "comm_total_us" in steps.columns:
        total = int(steps.get_column("comm_total_us").sum() or 0)
        hidden = int(steps.get_column("comm_hidden_us").sum() or 0)
        exposed = int(steps.get_column("comm_us").sum() or 0) if "comm_us" in steps.columns else 0
        if total:
            text += (f" · in flight {fmt_us(total)} over the ranks' steps, {fmt_share(hidden / total)} hidden under "
                     "compute, "
                     f"exposed {fmt_us(exposed)}")  # fmt: skip
    clocks = summary.table("clocks")
    moved = clocks.filter(pl.col("offset_us") != 0) if clocks.height else clocks
    if moved.height:
        res = max(int(v or 0) for v in moved.get_column("residual_us").to_list())
        text += f" · clocks of {moved.height} rank(s) on other hosts aligned (residual {fmt_us(res)})"
    return text


def render_collectives(summary: Summary, console: Console, top: int | None = None) -> bool:
    """The stragglers table, the communication line and the clocks table where clocks were moved."""
    printed = False
    spec = SPEC_BY_ATTR["stragglers"]
    frame = summary.table("stragglers")
    if frame.height and frame.get_column("epoch").null_count() == frame.height:
        spec = replace(spec, cols=tuple(c for c in spec.cols if c.key != "epoch"))
    table = summary_table(summary, spec, top)
    if table is not None:
        console.print()
        console.print(table)
        printed = True
    line = comm_line(summary)
    if line:
        console.print(Prose(line))
        printed = True
    clocks = summary.table("clocks")
    if clocks.height and clocks.filter(pl.col("offset_us") != 0).height:
        table = summary_table(summary, SPEC_BY_ATTR["clocks"], None)
        if table is not None:
            console.print()
            console.print(table)
    return printed
