"""The self-contained HTML report: one file, no network at view time.

Everything the page needs is inline: CSS, the charts (HTML/CSS bars and inline SVG built from numbers
computed here), and one small script that makes tables sortable. A Content-Security-Policy forbids
every fetch and lets only our own script (by nonce) run, and jinja2 escapes every value: op names,
layer names, paths and source text from a model cannot inject markup or script.

    html = render_html(summary, explanation=load_explanation(path))
    write_html(summary, "report.html", explanation=...)
"""

from __future__ import annotations

import datetime as _dt
import math
import secrets
from pathlib import Path
from typing import Any

import polars as pl
from jinja2 import ChainableUndefined, Environment, FileSystemBytecodeCache, FileSystemLoader, select_autoescape

from dynascope.analyze.summary import Summary
from dynascope.artifacts.explanation import CompileTime, Report, with_wall_times
from dynascope.artifacts.run_dir import load_compile_profile, load_explanation
from dynascope.render._fmt import (
    compile_run_totals,
    fmt_share,
    fmt_us,
    frame_of,
    is_missing,
    meta_facts,
    meta_files,
    meta_warnings,
    op_tables,
    phase_totals,
    summary_top,
)
from dynascope.render.explanation_text import compile_times_heading
from dynascope.render.html_views import (
    _break_costs,
    _compile_chart,
    _costs_view,
    _files_view,
    _kernel_code,
    _layer_chart,
    _num,
    _phase_chart,
    _process_chart,
    _step_chart,
    _step_label,
    _steps_view,
    _table_view,
    compile_wall_us,
)
from dynascope.render.table_specs import RANK_SPEC, SPEC_BY_ATTR, STEP_PARTS
from dynascope.userframes import library_text

__all__ = ["render_html", "write_html"]

TEMPLATES = Path(__file__).with_name("templates")
HTML_ROWS = 200  # rows per table in the HTML (the terminal shows Summary.top)
# tables with a section of their own (file I/O; graph breaks, recompiles, compiled functions, vs eager)
_OWN_SECTIONS = ("by_file", "graph_breaks", "recompiles", "compiled_functions", "vs_eager")


def _env() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(TEMPLATES)),
        # the templates compiled once per user (jinja's own cache in the temp directory, keyed by each
        # template's source): compiling them took 0.2 s of every report
        bytecode_cache=FileSystemBytecodeCache(),
        autoescape=select_autoescape(enabled_extensions=("html", "j2", "html.j2"), default=True),
        undefined=ChainableUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=lambda value: "" if value is None else value,  # a missing field prints as nothing
    )
    env.filters["us"] = fmt_us
    env.filters["share"] = fmt_share
    env.filters["seconds"] = _fmt_seconds
    env.filters["where"] = _where
    env.filters["library"] = _library
    return env


def _fmt_seconds(value: Any) -> str:
    if is_missing(value) or not isinstance(value, (int, float)):
        return "–"
    return fmt_us(float(value) * 1e6)


# ----------------------------------------------------------------------------------------- tables


def _compile_time_chart(times: list[CompileTime]) -> dict | None:
    peak = max((_num(ct.total_s) for ct in times), default=0.0)
    if peak <= 0:
        return None
    bars = []
    for ct in times:
        total = _num(ct.total_s)
        known = {k: _num(getattr(ct, f"{k}_s")) for k in ("dynamo", "aot", "backend", "inductor", "backward")}
        # inductor runs inside the backend call: show backend minus inductor, then inductor
        if known["inductor"] and known["backend"] >= known["inductor"]:
            known["backend"] -= known["inductor"]
        rest = max(0.0, total - sum(known.values()))
        segs = [
            {"cls": f"c-{k}", "pct": v / peak * 100, "title": f"{k} {_fmt_seconds(v)}"}
            for k, v in (*known.items(), ("other", rest))
            if v > 0
        ]
        label = f"{ct.compile_id or '?'} {ct.function or ''}".strip()
        bars.append({"label": label, "module": ct.status or "", "value": _fmt_seconds(total), "segments": segs})
    return {"bars": bars, "more": 0}


# ------------------------------------------------------------------------------------ explanation


def _profile_view(profile: dict | None, rows: int) -> dict | None:
    """The compile-profile section: its tables cut to `rows`, lists that are not lists left empty."""
    if not isinstance(profile, dict):
        return None
    view = {k: v for k, v in profile.items() if not isinstance(v, list)}
    for key in ("functions", "lines", "frames", "graph_breaks", "recompiles", "notes"):
        items = profile.get(key)
        items = [x for x in items if isinstance(x, (dict, str))] if isinstance(items, list) else []
        view[key] = items if key in ("frames", "notes") else items[:rows]
        view[f"{key}_count"] = len(items)
    return view


def _library(user_line: Any) -> str | None:
    """The library line torch named for a guard whose user line the explanation gives ("torch/nn/...:560")."""
    return library_text(getattr(user_line, "library_file", None), getattr(user_line, "library_line", None))


def _where(obj: Any) -> str:
    """file:line of anything the explanation model places in a file (a function, a break, a user line)."""
    if isinstance(obj, dict):
        file, line = obj.get("file"), obj.get("line")
    else:
        file, line = getattr(obj, "file", None), getattr(obj, "line", None)
    if not file:
        return ""
    return f"{file}:{line}" if line not in (None, "") else str(file)


def _explanation_view(explanation: Report | dict | None, summary: Summary | None = None,
                      path: str | None = None) -> dict | None:
    """The explanation section: the Report itself (read with the explain model's own from_dict), the
    file it came from, the numbers computed from it, and each graph break's run-time cost from the trace."""
    if explanation is None or not isinstance(explanation, (Report, dict)):
        return None
    report = explanation if isinstance(explanation, Report) else Report.from_dict(explanation)
    path = path or (explanation.get("_path") if isinstance(explanation, dict) else None)
    costs = _break_costs(summary) if summary is not None else {}
    break_costs = []
    for b in report.graph_breaks:
        found = [costs.get(("id", cid)) for cid in b.compile_ids] + [costs.get(("line", b.file, b.line))]
        break_costs.append(next((c for c in found if c), ""))
    # the compile times as the trace measured them, where there is one: the same figures as the report's
    wall = compile_wall_us(summary) if summary is not None else {}
    times = with_wall_times(report.compile_times, wall) if wall else report.compile_times
    return {
        "report": report,
        "path": path or "",
        "compile_times": times,
        "compile_heading": compile_times_heading(times) if times else "",
        "compile_total_s": sum(_num(ct.total_s) for ct in times),
        "compile_chart": _compile_time_chart(times),
        "break_costs": break_costs,
    }


# ----------------------------------------------------------------------------------------- public


def _version() -> str:
    try:
        from dynascope._version import __version__

        return __version__
    except Exception:  # noqa: BLE001  # pragma: no cover - a report without a version is still a report
        return "?"


def render_html(
    summary: Summary, explanation: Report | dict | None = None, title: str | None = None, rows: int = HTML_ROWS,
    compile_profile: dict | None = None, explanation_path: str | None = None,
) -> str:
    """The report as one HTML string. `explanation` is a Report, the parsed explanation.json, or None
    (`explanation_path`: the file it is, to name); `compile_profile` the parsed compile_profile.json, or None."""
    top = summary_top(summary)
    limit = max(top, rows)
    tables = {
        attr: _table_view(summary, attr, None if not spec.limit_to_top else limit)
        for attr, spec in SPEC_BY_ATTR.items()
        if attr not in _OWN_SECTIONS
    }
    compile_us, run_us = compile_run_totals(summary)
    phases = phase_totals(summary)
    cards = [{"label": label, "value": value} for label, value in meta_facts(summary)]
    if compile_us or run_us:
        cards.append({"label": "compile", "value": fmt_us(compile_us)})
        cards.append({"label": "run", "value": fmt_us(run_us)})
    if phases.get("forward") and phases.get("backward"):
        cards.append({"label": "backward / forward", "value": f"{phases['backward'] / phases['forward']:.2f}×"})
    expl = _explanation_view(explanation, summary, explanation_path)
    files = meta_files(summary)
    steps = _steps_view(summary)
    file_io = _files_view(summary, limit)
    order = [*op_tables(summary), "by_layer", "by_device", "gpu_launchers", "by_graph", "memory_by_layer",
             "memory_by_graph", "memory_by_step", "cache_entries", "by_step", "by_process"]  # fmt: skip
    context = {
        "title": title or "trace report",
        "nonce": secrets.token_urlsafe(16),
        "version": _version(),
        "generated": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cards": cards,
        "files": files,
        "warnings": meta_warnings(summary),
        "tables": tables,
        "top_table_order": [a for a in order if not (steps and a == "by_step")],
        "steps": steps,
        "file_io": file_io,
        "costs": _costs_view(summary, limit),
        "kernel_code": _kernel_code(summary),
        "charts": {
            "compile": _compile_chart(summary),
            "phase": _phase_chart(summary),
            "layers": _layer_chart(summary),
            "steps": None if steps else _step_chart(summary),
            "processes": _process_chart(summary),
        },
        "expl": expl,
        "prof": _profile_view(compile_profile, max(rows, 25)),
        "ranks": _ranks_view(summary),
        "comm": _comm_view(summary, rows),
        "memory_lines": _memory_findings(summary),
    }
    return _env().get_template("report.html.j2").render(**context)


def write_html(
    summary: Summary, out: str | Path, explanation: Report | dict | str | Path | None = None, title: str | None = None,
    compile_profile: dict | str | Path | None = None, explanation_path: str | None = None,
) -> Path:
    """Write the report to `out`; `explanation` may be a parsed dict or the path of explanation.json,
    `compile_profile` a parsed dict or the path of compile_profile.json."""
    if isinstance(explanation, (str, Path)):
        explanation = load_explanation(explanation)
    if isinstance(compile_profile, (str, Path)):
        compile_profile = load_compile_profile(compile_profile)
    out = Path(out)
    if not out.parent.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_html(summary, explanation, title, compile_profile=compile_profile,
                               explanation_path=explanation_path), encoding="utf-8")  # fmt: skip
    return out


# ------------------------------------------------------------------------------------------------
# many ranks (analyze/ranks.py, docs/ranks.md)

HEAT_STEPS = 200  # steps shown in the rank x step view
HEAT_RANKS = 256  # ranks shown in it


def _heat_alpha(value: float, low: float, high: float) -> float:
    """A cell's shade: 0.06 at the fastest cell, 0.9 at the slowest, on a log scale (a compile step would
    flatten a linear one)."""
    if value <= 0 or high <= low:
        return 0.06
    return round(0.06 + 0.84 * (math.log(value) - math.log(low)) / (math.log(high) - math.log(low)), 3)


def _ranks_view(summary: Summary) -> dict | None:
    """The many-ranks section: the divergence (first first), the per-rank table and a rank x step heat map
    (each cell the step's wall time on that rank, its parts on hover, the slowest rank of each step marked).
    None for a trace without ranks."""
    by_rank = frame_of(summary, "by_rank")
    if by_rank.height == 0 or "rank" not in by_rank.columns:
        return None
    divergence = [dict(r) for r in frame_of(summary, "divergence").iter_rows(named=True)]
    rank_steps = frame_of(summary, "by_rank_step")
    heat = None
    if rank_steps.height and "step" in rank_steps.columns:
        rs = rank_steps.filter(pl.col("step").is_not_null()) if rank_steps["step"].null_count() < rank_steps.height \
            else rank_steps  # fmt: skip
        keys = rs.select("epoch", "step").unique(maintain_order=True).sort(["epoch", "step"], nulls_last=False)
        steps = [tuple(k) for k in keys.head(HEAT_STEPS).iter_rows()]
        ranks = sorted(rs.get_column("rank").unique().to_list())[:HEAT_RANKS]
        parts = [(p, label) for p, label in STEP_PARTS if f"{p}_us" in rs.columns]
        if "comm_us" in rs.columns and all(p != "comm" for p, _ in parts):
            parts.append(("comm", "exposed comm"))
        cells: dict[tuple, dict] = {}
        for r in rs.iter_rows(named=True):
            cells[(r["rank"], r["epoch"], r["step"])] = r
        values = [_num(c["total_us"]) for c in cells.values() if _num(c["total_us"]) > 0]
        low, high = (min(values), max(values)) if values else (0.0, 0.0)
        slowest = {(r["epoch"], r["step"]): r.get("rank") for r in frame_of(summary, "by_step").iter_rows(named=True)}
        rows = []
        for rank in ranks:
            row = []
            for epoch, step in steps:
                c = cells.get((rank, epoch, step))
                if c is None:
                    row.append({"text": "", "title": f"rank {rank}, {_step_label(epoch, step, 0)}: no such step",
                                "alpha": 0, "slowest": False})  # fmt: skip
                    continue
                total = _num(c["total_us"])
                shown = [f"{label} {fmt_us(c[f'{p}_us'])}" for p, label in parts if _num(c.get(f"{p}_us")) > 0]
                row.append({
                    "text": fmt_us(total), "alpha": _heat_alpha(total, low, high),
                    "slowest": slowest.get((epoch, step)) == rank,
                    "title": f"rank {rank}, {_step_label(epoch, step, 0)}: {fmt_us(total)}"
                             + (f" ({', '.join(shown)})" if shown else "")
                             + (" · the slowest rank of this step" if slowest.get((epoch, step)) == rank else ""),
                })  # fmt: skip
            rows.append({"rank": rank, "cells": row})
        heat = {
            "steps": [_step_label(e, s, i) if e is not None else str(s) for i, (e, s) in enumerate(steps)],
            "rows": rows, "low": fmt_us(low), "high": fmt_us(high),
            "more_steps": max(0, keys.height - len(steps)),
            "more_ranks": max(0, rs.get_column("rank").n_unique() - len(ranks)),
        }  # fmt: skip
    return {
        "n": by_rank.height,
        "divergence": divergence,
        "table": _table_view(summary, "by_rank", None, RANK_SPEC),
        "heat": heat,
    }


# ----------------------------------------------------------------------------------------------
# collectives across ranks (analyze/comm.py, docs/ranks.md)


def _memory_findings(summary: Summary) -> list[dict]:
    """Out of memory, and compiled against eager, as the terminal says them (render/memory_text.py): one
    panel per headline, its "  - " lines as items."""
    from dynascope.render.memory_text import out_of_memory_lines, vs_eager_lines

    panels: list[dict] = []
    for line in out_of_memory_lines(summary) + vs_eager_lines(summary):
        if line.startswith("  - ") and panels:
            panels[-1]["points"].append(line.removeprefix("  - "))
        else:
            panels.append({"head": line, "points": [], "bad": line.startswith("Out of memory")})
    return panels


def _comm_view(summary: Summary, limit: int = HTML_ROWS) -> dict | None:
    """The hang finding (shown first), the stragglers, the collectives joined across ranks and the clocks;
    None for a trace without collectives."""
    from dynascope.render.terminal_ranks import comm_line, hang_text, straggler_lines

    hangs = hang_text(summary)
    tables = {
        attr: _table_view(summary, attr, limit)
        for attr in ("hangs", "stragglers", "collectives", "clocks")
        if frame_of(summary, attr).height
    }
    clocks = frame_of(summary, "clocks")
    if clocks.height and not clocks.filter(pl.col("offset_us") != 0).height:
        tables.pop("clocks", None)  # every rank on one host: one clock, nothing to show
    line = comm_line(summary)
    if not hangs and not tables and not line:
        return None
    return {"hangs": [h.removeprefix("Hang: ") for h in hangs], "stragglers": straggler_lines(summary, shown=3),
            "line": line, "tables": tables}  # fmt: skip
