"""Summaries as rich tables in the terminal.

`render_summary` prints every table, the per-step breakdown first; `render_short` prints the compact
end-of-run summary that `dynascope demo` and `dynascope run` show (a few lines on the steps, top ops,
forward vs backward, compile vs run).
Both stay readable at any width and when piped: colour is dropped when the output is not a terminal,
every table fits the console's width (render/_table.py: numbers whole, names cut, sentences wrapped,
columns left out in each table's documented order, `_fmt.py`), and every cell is plain text (op names
are never read as markup).
"""

from __future__ import annotations

from dataclasses import replace

import polars as pl
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.padding import Padding
from rich.text import Text

from dynascope.analyze.stepstats import step_rows, step_stats
from dynascope.analyze.summary import Summary
from dynascope.console import PIPE_WIDTH, Prose, make_console
from dynascope.render._fmt import (
    compile_files_line,
    compile_run_totals,
    file_view,
    fmt_share,
    fmt_us,
    fmt_value,
    io_line,
    meta_facts,
    meta_warnings,
    op_tables,
    phase_totals,
    present_cols,
    step_cols,
    step_part_totals,
    summary_top,
)
from dynascope.render._table import NUMERIC_KINDS, Column, FitTable
from dynascope.render.memory_text import memory_line, out_of_memory_lines, vs_eager_lines
from dynascope.render.table_specs import SPEC_BY_ATTR, STEP_PARTS, Col
from dynascope.render.terminal_ranks import (
    divergence_lines,
    hang_text,
    ranks_line,
    render_collectives,
    render_divergence,
    render_hangs,
    render_ranks,
    straggler_lines,
)
from dynascope.render.terminal_tables import cell, spec_table, summary_table

__all__ = [
    "StepTable", "file_table", "make_console", "render_files", "render_short", "render_steps", "render_summary",
    "short_text", "step_table", "summary_table", "summary_text",
]  # fmt: skip



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
        ranks = summary.table("by_rank").height  # a job: every rank's compile and run added (docs/ranks.md)
        over = f" over {ranks} ranks" if ranks > 1 else ""
        parts.append(f"compile {fmt_us(compile_us)}{over} ({fmt_share(compile_us / total)}), run {fmt_us(run_us)}")
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


# the step parts a narrow table folds into its "other" column rather than leave out (their time would then
# be missing from the parts, which must add to the wall time): every part but the big three and "other"
_FOLDED_PARTS = ("io", "data", "optimizer", "eval")


class StepTable:
    """The per-step breakdown (`step_table`), laid out for the width it is printed at. A step part that the
    width leaves out is not lost: its time is counted in the "other" column (the title says so: "I/O
    counted in other"), so that the parts shown add to each step's wall time and the shares to 100%."""

    def __init__(self, summary: Summary, limit: int | None) -> None:
        self.summary, self.limit = summary, limit

    def fit(self, folded: frozenset[str] = frozenset()) -> FitTable:
        """The table with the parts `folded` counted in "other"."""
        return _stepspec_table(self.summary, self.limit, folded)

    def laid_out(self, width: int) -> FitTable:
        """The table to print at `width`: the parts left out at that width folded into "other" (again, until
        no further part is left out, or "other" itself is)."""
        folded: frozenset[str] = frozenset()
        while True:
            table = self.fit(folded)
            gone = set(table.left_out(width))
            if "other" in gone:
                return table
            more = {part for part, label in STEP_PARTS if label in gone and part in _FOLDED_PARTS}
            if not more:
                return table
            folded |= more

    @property
    def title(self) -> str:
        return self.fit().title

    @property
    def row_count(self) -> int:
        return self.fit().row_count

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.laid_out(options.max_width)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.laid_out(options.max_width))


def step_table(summary: Summary, limit: int | None = None) -> StepTable | None:
    """The per-step breakdown: one row per step (wall time and its parts), then the median, p95 and share
    rows over the steps (a StepTable: parts a narrow width leaves out are counted in "other"). None without
    steps."""
    if summary.table("by_step").height == 0 or not step_cols(summary):
        return None
    return StepTable(summary, limit)


def _stepspec_table(summary: Summary, limit: int | None, folded: frozenset[str]) -> FitTable:
    frame = summary.table("by_step")
    present = {c.key for c in step_cols(summary)}
    stats = summary.table("step_stats")
    if folded:
        into = [f"{p}_us" for p in sorted(folded) if f"{p}_us" in frame.columns]
        other = pl.sum_horizontal(pl.col("other_us").fill_null(0), *(pl.col(c).fill_null(0) for c in into))
        frame = frame.with_columns(other.alias("other_us"))
        stats = step_stats(frame)
        present = (present - {f"{p}_us" for p in folded}) | {"other_us"}
    cols = [c for c in present_cols(frame, SPEC_BY_ATTR["by_step"].cols) if c.key in present]
    n = frame.height
    shown = frame.head(limit) if limit is not None and n > limit else frame
    title = "Steps: where each step's time goes"
    if shown.height < n:
        title += f" (first {shown.height} of {n:,})"
    labels = [label for part, label in STEP_PARTS if part in folded]
    if labels:
        said = labels[0] if len(labels) == 1 else f"{', '.join(labels[:-1])} and {labels[-1]}"
        title += f" ({said} counted in other)"
    cols = [replace(c, max_width=40) if c.kind == "names" else c for c in cols]
    spec = SPEC_BY_ATTR["by_step"]
    if "rank" in frame.columns:  # many ranks: each step is the job's, its slowest rank's (analyze/ranks.py)
        at = next((i + 1 for i, c in enumerate(cols) if c.key == "total_us"), len(cols))
        cols.insert(at, Col("rank", "slowest", "id"))
        title = title.replace("Steps: where each step's time goes", "Steps of the job: each the slowest rank's", 1)
        spec = replace(spec, drop=(*spec.drop[:3], "rank", *spec.drop[3:]))
    table = spec_table(title, cols, spec)
    for row in shown.select([c.key for c in cols]).iter_rows(named=True):
        table.add_row(*(cell(row.get(c.key), c.kind) for c in cols))
    if stats.height and {"part", "median_us", "p95_us", "share"} <= set(stats.columns):
        by_part = {r["part"]: r for r in stats.iter_rows(named=True)}
        for n_row, (label, key, kind) in enumerate(
            (("median", "median_us", "us"), ("p95", "p95_us", "us"), ("share", "share", "share"))
        ):
            cells = []
            for col in cols:
                part = "total" if col.key == "total_us" else col.key[: -len("_us")] if col.key.endswith("_us") else None
                if part in by_part and col.key != "op_us":
                    cells.append(Text(fmt_value(by_part[part][key], kind), style="bold"))
                else:
                    cells.append(Text(""))
            # the label goes in the first column shown (the epoch or step column, unless a narrow width left
            # it out)
            table.add_row(*cells, label=Text(label, style="bold"), section=n_row == 0)
    return table


def file_table(summary: Summary, limit: int | None = None) -> FitTable | None:
    """The files with I/O outside compile phases, most time first (None: there are none)."""
    view = file_view(summary, limit)
    if view is None or view.frame.height == 0:
        return None
    n = view.frame.height
    shown = view.frame.head(limit) if limit is not None and n > limit else view.frame
    title = "Files: where the program's file I/O goes"
    if shown.height < n:
        title += f" (top {shown.height} of {n:,})"
    text_style = {c.key: "cyan" for c in view.cols if c.kind not in NUMERIC_KINDS}
    table = spec_table(title, view.cols, SPEC_BY_ATTR["by_file"], text_style, cut_start=("fname",))
    for row in shown.select([c.key for c in view.cols]).iter_rows(named=True):
        table.add_row(*(Text(str(row[c.key])) if c.key == "fname" else cell(row.get(c.key), c.kind)
                        for c in view.cols))  # fmt: skip
    return table


def render_files(summary: Summary, console: Console, top: int | None = None) -> bool:
    """The file I/O table and the line on files touched only while compiling; False without file I/O."""
    view = file_view(summary)
    if view is None:
        return False
    table = file_table(summary, top)
    line = compile_files_line(view)
    console.print()
    if table is not None:
        console.print(table)
    if line is not None:
        console.print(Prose(line if table is not None else f"File I/O: {line.replace('more ', '', 1)}"))
    return True


def slow_step_lines(summary: Summary) -> list[str]:
    """One line per slow step: which, how long, and what was different about it."""
    slow = summary.table("slow_steps")
    if slow.height == 0 or "why" not in slow.columns:
        return []
    lines = []
    for r in slow.iter_rows(named=True):
        lines.append(f"{_step_name(r)} took {fmt_us(r.get('total_us'))} (+{fmt_us(r.get('over_us'))} over the "
                     f"median step): {r.get('why')}")  # fmt: skip
    return lines


def _step_name(row: dict) -> str:
    epoch, step = row.get("epoch"), row.get("step")
    parts = [f"epoch {epoch}" if epoch is not None else "", f"step {step}" if step is not None else ""]
    return " ".join(p for p in parts if p) or "step"


def render_steps(summary: Summary, console: Console, top: int | None = None) -> bool:
    """The per-step breakdown and the slowest steps; False (nothing printed) without steps."""
    table = step_table(summary, top)
    if table is None:
        return False
    console.print()
    console.print(table)
    lines = slow_step_lines(summary)
    if lines:
        console.print(Text("Slowest steps", style="bold"))
        for line in lines:
            console.print(Prose(f"  {line}"))
    return True


def _cost_table(summary: Summary, attr: str, limit: int | None) -> FitTable | None:
    """Graph breaks or recompiles by cost: the numbers, then each row's reason, code and fix in one wrapped
    cell (they are sentences: a column each would push the numbers off the screen)."""
    shown, title = _cost_rows(summary, attr, limit)
    if shown is None:
        return None
    cols = [c for c in SPEC_BY_ATTR[attr].cols if c.key not in ("reason", "fix", "function") and c.key in shown.columns]
    # no column is left out: where they do not all fit (the why column 40 wide), render_costs prints blocks
    table = spec_table(title, cols, None, {c.key: "cyan" for c in cols if c.kind not in NUMERIC_KINDS},
                       cut_start=("source",))  # fmt: skip
    table.columns.append(Column("why, and what to do", numeric=False, min_width=40, max_width=72, wrap=True))
    for row in shown.iter_rows(named=True):
        cells = [cell(row.get(c.key), c.kind) for c in cols]
        if attr == "graph_breaks" and not row.get("measurable"):
            cells = [cells[0], *(Text("–") for _ in cells[1:])]
        cells.append(_whycell(row, attr))
        table.add_row(*cells)
    return table


def _cost_rows(summary: Summary, attr: str, limit: int | None) -> tuple[pl.DataFrame | None, str]:
    """The rows to show (None when the table is empty) and the title that says which."""
    frame = summary.table(attr)
    if frame.height == 0:
        return None, ""
    shown = frame.head(limit) if limit is not None and frame.height > limit else frame
    title = SPEC_BY_ATTR[attr].title + (" (steady state, warm-up calls left out)" if attr == "graph_breaks" else "")
    if shown.height < frame.height:
        title += f" (top {shown.height} of {frame.height:,})"
    return shown, title


def _whycell(row: dict, attr: str) -> Text:
    text = Text()
    text.append(str(row.get("reason") or ""))
    if row.get("note"):
        text.append(f" ({row['note']})", style="dim")
    if row.get("code"):
        text.append("\n  ")
        text.append(str(row["code"]), style="cyan")
    elif row.get("function") and attr == "graph_breaks":
        text.append(f"\n  in {row['function']}", style="dim")
    if row.get("library"):  # the library line the user's line led to (the first user frame is charged)
        text.append(f"\n  via {row['library']}", style="dim")
    if attr == "recompiles" and row.get("function"):
        text.append(f"\n  in {row['function']}", style="dim")
    if row.get("ranks"):  # many ranks whose explanations differ: which ranks it happened on
        text.append(f"\n  on rank{'s' if ',' in str(row['ranks']) else ''} {row['ranks']} only", style="bold")
    if row.get("fix"):
        text.append("\nfix: ", style="bold green")
        text.append(str(row["fix"]))
    return text




def _cost_blocks(summary: Summary, attr: str, limit: int | None, console: Console) -> bool:
    """Graph breaks or recompiles by cost as one block per row, for a narrow terminal."""
    shown, title = _cost_rows(summary, attr, limit)
    if shown is None:
        return False
    console.print(Text(title, style="bold"))
    numbers = [c for c in SPEC_BY_ATTR[attr].cols
               if c.key not in ("source", "reason", "fix", "function") and c.key in shown.columns]  # fmt: skip
    for i, row in enumerate(shown.iter_rows(named=True), 1):
        measured = attr != "graph_breaks" or row.get("measurable")
        facts = ", ".join(f"{c.label} {fmt_value(row.get(c.key), c.kind) if measured else '–'}" for c in numbers)
        console.print(Text(f"{i:>3}. ").append(str(row.get("source") or "?"), style="cyan"))
        console.print(Padding(Prose(Text(facts).append("\n").append_text(_whycell(row, attr))), (0, 0, 0, 5),
                              expand=False))  # fmt: skip
    return True


def render_costs(summary: Summary, console: Console, top: int | None = None) -> int:
    """Graph breaks and recompiles by cost, and the run against its eager run; how many tables it printed.
    A narrow terminal gets each row as a block instead of a table."""
    printed = 0
    for attr in ("graph_breaks", "recompiles"):
        table = _cost_table(summary, attr, top)
        if table is not None and not table.fits(console.width):  # the why column would be a sliver: blocks
            console.print()
            printed += int(_cost_blocks(summary, attr, top, console))
            continue
        if table is not None:
            console.print()
            console.print(table)
            printed += 1
    lines = eager_lines(summary)
    if lines:
        console.print()
        console.print(Text("Compiled against eager (medians of the steady calls and steps)", style="bold"))
        for line in lines:
            console.print(Prose(f"  {line}"))
        printed += 1
    return printed


def eager_lines(summary: Summary) -> list[str]:
    """One line per compiled function (and the steps) against the eager run: the two medians and the verdict."""
    table = summary.table("vs_eager")
    if table.height == 0:
        return []
    return [f"{r['what']}: {fmt_us(r['compiled_us'])} compiled, {fmt_us(r['eager_us'])} eager; {r['verdict']}"
            for r in table.iter_rows(named=True)]  # fmt: skip


def render_summary(summary: Summary, console: Console | None = None, top: int | None = None) -> None:
    """Print every non-empty table of `summary`: header, the per-step breakdown (first: where each step's
    time goes, the median and p95 step, the slowest steps and why), the files (I/O outside compile phases,
    and one line for the files touched only while compiling), compile vs run, phases, ops, layers, graphs,
    processes."""
    console = console or make_console()
    top = top or summary_top(summary)
    console.print(Prose(_header(summary)))
    headline = _headline(summary)
    if headline is not None:
        console.print(Prose(headline))
    for warning in meta_warnings(summary):
        console.print(Prose(f"warning: {warning}", style="yellow"))
    printed = int(render_hangs(summary, console))
    for line in out_of_memory_lines(summary) + vs_eager_lines(summary):
        console.print(Prose(line, style="bold red" if line.startswith("Out of memory") else ""))
        printed += 1
    printed += int(render_divergence(summary, console))
    printed += int(render_steps(summary, console, top))
    printed += int(render_ranks(summary, console))
    printed += int(render_collectives(summary, console, top))
    gpu = gpu_idle_line(summary)
    if gpu:
        console.print(Prose(gpu))
    printed += int(render_files(summary, console, top))
    printed += render_costs(summary, console, top)
    order = ("compiled_functions", "cache_entries", "compile_vs_run", "by_device", "gpu_launchers", "by_phase",
             *op_tables(summary), "by_layer", "by_graph", "memory_by_layer", "memory_by_graph", "memory_by_step",
             "by_process")  # fmt: skip
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
        console.print(Prose("  ·  ".join(f"{label} {value}" for label, value in facts)))
    headline = _headline(summary)
    if headline is not None:
        console.print(Prose(headline))
    for warning in meta_warnings(summary):
        console.print(Prose(f"warning: {warning}", style="yellow"))
    memory = out_of_memory_lines(summary) + vs_eager_lines(summary)
    for line in hang_text(summary) + straggler_lines(summary) + memory:
        console.print(Prose(line, style="bold red" if line.startswith(("Hang", "Out of memory")) else ""))
    for line in divergence_lines(summary, shown=1):
        console.print(Prose(line, style="bold red"))
    rank_line = ranks_line(summary)
    if rank_line:
        console.print(Prose(rank_line))
    for line in short_step_lines(summary):
        console.print(Prose(line))
    gpu = gpu_idle_line(summary)
    if gpu:
        console.print(Prose(gpu))
    view = file_view(summary)
    if view is not None:
        console.print(Prose(io_line(view)))
    memory_summary = memory_line(summary)
    if memory_summary:
        console.print(Prose(memory_summary))
    if render_costs(summary, console, top) and summary.vs_eager.height == 0:
        console.print(Text("(whether compiling paid off: dynascope run --compare-eager)", style="dim"))
    attr = op_tables(summary)[0]
    spec = SPEC_BY_ATTR[attr]
    spec = replace(spec, cols=tuple(c for c in spec.cols if c.key not in ("cat", "kernel_kind")))
    table = summary_table(summary, spec, top)
    if table is not None:
        what = "inductor kernels" if attr == "by_kernel" else "ops"
        table.title = f"Top {min(top, table.row_count)} {what} by total time"
        console.print(table)
    else:
        console.print("no op events in the trace")


def gpu_idle_line(summary: Summary) -> str | None:
    """How long the GPU worked and waited within the steps, where the trace has device events."""
    steps = step_rows(summary.table("by_step"))
    if "gpu_idle_us" not in steps.columns or steps.height == 0:
        return None
    known = steps.filter(pl.col("gpu_us").is_not_null())  # a step the program's own profiler ran in has none
    wall = int(known.get_column("total_us").sum() or 0)
    busy = int(known.get_column("gpu_us").sum() or 0)
    unknown = steps.height - known.height
    plural = "s" if unknown > 1 else ""
    without = f" ({unknown} step{plural} without: the program's own profiler ran)" if unknown else ""
    if not wall:
        return f"GPU: no figures for the steps{without}" if unknown else None
    idle = max(wall - busy, 0)
    return (f"GPU: busy {fmt_us(busy)} of the steps' {fmt_us(wall)}; idle {fmt_us(idle)} ({idle / wall:.0%}), "
            f"time the GPU waited for the CPU{without}")  # fmt: skip


def short_step_lines(summary: Summary, slowest: int = 2) -> list[str]:
    """A few lines on the steps for the end-of-run summary: how many, median and p95, where the time of
    all steps went, and the slowest steps with why. None without steps."""
    stats = summary.table("step_stats")
    if stats.height == 0 or "part" not in stats.columns:
        return []
    n = step_rows(summary.table("by_step")).height  # epoch-only regions are not steps
    total = next(r for r in stats.iter_rows(named=True) if r["part"] == "total")
    lines = [f"Steps: {n:,} · median {fmt_us(total['median_us'])}, p95 {fmt_us(total['p95_us'])} per step"]
    wall = sum(v for _, _, v in step_part_totals(summary))
    if wall:
        shares = sorted(step_part_totals(summary), key=lambda t: -t[2])
        compile_us, _ = compile_run_totals(summary)
        lines.append("  time in steps: " + ", ".join(
            f"{label} {fmt_share(v / wall)}" + (_compile_outside_steps(v, compile_us) if part == "compile" else "")
            for part, label, v in shares))  # fmt: skip
    lines += [f"  {line}" for line in slow_step_lines(summary)[:slowest]]
    return lines


def _compile_outside_steps(in_steps: float, compile_us: float) -> str:
    """" (X in steps of Y)" where the steps hold less than the run's compile time (the headline's: compiles
    before the first step or between steps, worker threads' compiling after the step ended), else ""."""
    if compile_us <= 0 or fmt_us(in_steps) == fmt_us(compile_us) or in_steps >= compile_us:
        return ""
    return f" ({fmt_us(in_steps)} in steps of {fmt_us(compile_us)})"


def _to_text(fn, summary: Summary, width: int, **kwargs) -> str:
    import io

    buf = io.StringIO()
    fn(summary, make_console(buf, width=width, color=False), **kwargs)
    return buf.getvalue()


def summary_text(summary: Summary, width: int = PIPE_WIDTH, top: int | None = None) -> str:
    """render_summary as plain text (no colour)."""
    return _to_text(render_summary, summary, width, top=top)


def short_text(summary: Summary, width: int = PIPE_WIDTH, top: int = 5) -> str:
    """render_short as plain text (no colour)."""
    return _to_text(render_short, summary, width, top=top)
