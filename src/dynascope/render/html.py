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
from jinja2 import ChainableUndefined, Environment, FileSystemLoader, select_autoescape

from dynascope.analyze.summary import Summary
from dynascope.artifacts.explanation import CompileTime, Report, with_wall_times
from dynascope.artifacts.files import load_compile_profile, load_explanation
from dynascope.render._fmt import (
    SPEC_BY_ATTR,
    STEP_PARTS,
    Col,
    TableSpec,
    compile_files_line,
    compile_run_totals,
    file_view,
    fmt_share,
    fmt_us,
    fmt_value,
    frame_of,
    io_line,
    is_missing,
    meta_facts,
    meta_files,
    meta_warnings,
    op_tables,
    phase_totals,
    step_cols,
    summary_top,
    table_rows,
)
from dynascope.render.explanation_text import compile_times_heading
from dynascope.userframes import library_text

__all__ = ["render_html", "write_html"]

TEMPLATES = Path(__file__).with_name("templates")
HTML_ROWS = 200  # rows per table in the HTML (the terminal shows Summary.top)
KERNEL_CODE_ROWS = 60  # kernels whose code the HTML shows (the slowest first)
PHASE_ORDER = ("forward", "backward", "inference")
# tables with a section of their own (file I/O; graph breaks, recompiles, compiled functions, vs eager)
_OWN_SECTIONS = ("by_file", "graph_breaks", "recompiles", "compiled_functions", "vs_eager")


def _env() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(TEMPLATES)),
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


def _sort_key(value: Any, kind: str) -> str:
    if is_missing(value):
        return ""
    if kind not in ("text", "part"):
        try:
            return repr(float(value))
        except (TypeError, ValueError):
            return str(value)
    return str(value)


def _table_view(
    summary: Summary, attr: str, limit: int | None, spec: TableSpec | None = None, frame: pl.DataFrame | None = None
) -> dict | None:
    spec = spec or SPEC_BY_ATTR[attr]
    cols, rows, n = table_rows(summary, spec, limit, frame)
    if not rows:
        return None
    max_total = max((_num(row.get("total_us")) for row in rows), default=0.0)
    out_rows: list[list[dict]] = []
    for row in rows:
        cells = []
        for col in cols:
            value = row.get(col.key)
            cell: dict[str, Any] = {
                "text": fmt_value(value, col.kind), "sort": _sort_key(value, col.kind), "kind": col.kind
            }
            if col.kind == "share" and not is_missing(value):
                cell["bar"] = max(0.0, min(100.0, _num(value) * 100))
            if col.key == "total_us" and max_total > 0 and not is_missing(value):
                cell["bar"] = max(0.0, min(100.0, _num(value) / max_total * 100))
            if col.key in ("name", "layer", "graph", "host", "fname"):
                cell["code"] = True
            if attr == "by_kernel" and col.key == "name" and len(out_rows) < KERNEL_CODE_ROWS:
                cell["href"] = f"#kernel-{len(out_rows)}"
            cells.append(cell)
        out_rows.append(cells)
    return {
        "id": attr.replace("_", "-"),
        "title": spec.title,
        "cols": [{"label": c.label, "kind": c.kind} for c in cols],
        "rows": out_rows,
        "total": n,
        "shown": len(out_rows),
    }


def _kernel_code(summary: Summary, limit: int = KERNEL_CODE_ROWS) -> list[dict]:
    """The slowest kernels with what they cover and the code they run, for the folded code list."""
    frame = frame_of(summary, "by_kernel")
    if frame.height == 0:
        return []
    out = []
    for i, row in enumerate(frame.head(limit).to_dicts()):
        name = str(row.get("name") or "")
        language = "C++" if name.startswith("cpp_") else "Triton" if name.startswith("triton_") else "wrapper line"
        lines = [line for line in str(row.get("lines") or "").split(",") if line]
        out.append({
            "id": f"kernel-{i}",
            "name": name,
            "kind": row.get("kernel_kind") or "",
            "where": " · ".join(str(v) for v in (row.get("compile_id"), row.get("graph"), row.get("phase")) if v),
            "total": fmt_us(row.get("total_us")),
            "share": fmt_share(row.get("share")),
            "calls": row.get("count"),
            "mean": fmt_us(row.get("mean_us")),
            "ops": [t for t in str(row.get("target") or "").split(",") if t],
            "layers": [t for t in str(row.get("layers") or "").split(",") if t],
            "lines": lines,
            "code": row.get("code") or "",
            "language": language,
            "source": summary.sources.get(str(row.get("kernel_code") or ""), ""),
        })  # fmt: skip
    return out


# ----------------------------------------------------------------------------------------- charts


def _num(value: Any) -> float:
    if is_missing(value):
        return 0.0
    try:
        v = float(value)
    except (TypeError, ValueError):
        return 0.0
    return v if math.isfinite(v) else 0.0


def _split_bar(parts: list[tuple[str, str, float]]) -> dict | None:
    """One stacked bar: [(label, css class, µs)] → segments with percentages."""
    total = sum(v for _, _, v in parts)
    if total <= 0:
        return None
    segs = [
        {"label": label, "cls": cls, "value": fmt_us(v), "share": fmt_share(v / total), "pct": v / total * 100}
        for label, cls, v in parts
        if v > 0
    ]
    return {"total": fmt_us(total), "segments": segs}


def _phase_chart(summary: Summary) -> dict | None:
    phases = phase_totals(summary)
    order = [p for p in PHASE_ORDER if p in phases] + sorted(p for p in phases if p not in PHASE_ORDER)
    return _split_bar([(p, f"ph-{p}" if p in PHASE_ORDER else "ph-other", phases[p]) for p in order])


def _compile_chart(summary: Summary) -> dict | None:
    compile_us, run_us = compile_run_totals(summary)
    return _split_bar([("compile", "k-compile", compile_us), ("run", "k-run", run_us)])


def _layer_chart(summary: Summary, limit: int = 15) -> dict | None:
    frame = frame_of(summary, "by_layer")
    if frame.height == 0 or "layer" not in frame.columns or "total_us" not in frame.columns:
        return None
    rows = frame.sort("total_us", descending=True, nulls_last=True).head(limit).to_dicts()
    peak = max((_num(r.get("total_us")) for r in rows), default=0.0)
    if peak <= 0:
        return None
    bars = []
    for r in rows:
        total = _num(r.get("total_us"))
        fwd, bwd = _num(r.get("forward_us")), _num(r.get("backward_us"))
        other = max(0.0, total - fwd - bwd)
        segs = [
            {"cls": cls, "pct": v / peak * 100, "title": f"{name} {fmt_us(v)}"}
            for name, cls, v in (
                ("forward", "ph-forward", fwd),
                ("backward", "ph-backward", bwd),
                ("other", "ph-inference", other),
            )
            if v > 0
        ]
        label = r.get("layer")
        label = "(none)" if label in (None, "") else str(label)
        mtype = r.get("module_type")
        bars.append(
            {
                "label": label,
                "module": "" if mtype in (None, "") else str(mtype),
                "value": fmt_us(total),
                "segments": segs,
            }
        )
    return {"bars": bars, "more": max(0, frame.height - len(rows))}


class _StepAxes:
    """The layout both step charts share: one slot per step, a scale that stops at 5x the median step
    (a first step that compiles would flatten the rest; taller bars are cut and labelled), ticks and
    step labels (epoch:step where there are several epochs)."""

    def __init__(self, rows: list[dict], height: float) -> None:
        totals = sorted(_num(r.get("total_us")) for r in rows)
        peak = totals[-1] if totals else 0.0
        typical = totals[len(totals) // 2] if len(totals) >= 4 else peak  # the median: a quarter may compile
        self.scale = min(peak, 5 * typical) if typical > 0 else peak
        self.width, self.height, self.pad_left, pad_bottom, pad_top = 760.0, height, 56.0, 22.0, 18.0
        self.plot_h = height - pad_bottom - pad_top
        self.top, self.base = pad_top, pad_top + self.plot_h
        self.slot = (self.width - self.pad_left - 8) / max(len(rows), 1)
        self.bar_w = min(max(1.0, self.slot * 0.8), 36.0)
        self.epochs = {r.get("epoch") for r in rows if not is_missing(r.get("epoch"))}
        self.rows = rows

    def x(self, i: int) -> float:
        return self.pad_left + i * self.slot + (self.slot - self.bar_w) / 2

    def y(self, us: float) -> float:
        """The height of `us` on the chart, cut at the scale."""
        return min(us, self.scale) / self.scale * self.plot_h

    def ticks(self) -> list[dict]:
        return [{"y": round(self.base - f * self.plot_h, 2), "label": fmt_us(self.scale * f)} for f in (0.0, 0.5, 1.0)]

    def xlabels(self) -> list[dict]:
        labels = []
        for i in range(0, len(self.rows), max(1, math.ceil(len(self.rows) / 14))):
            epoch, step = self.rows[i].get("epoch"), self.rows[i].get("step")
            label = str(i if is_missing(step) else step)
            if len(self.epochs) > 1 and not is_missing(epoch):
                label = f"{epoch}:{label}"
            labels.append({"x": round(self.pad_left + i * self.slot + self.slot / 2, 2), "label": label})
        return labels


def _step_chart(summary: Summary, limit: int = 400) -> dict | None:
    """Columns per step: wall time, with the op time inside it. Outliers (a first step that compiles)
    would flatten the rest, so the scale stops at 5× the median step and taller bars are cut and
    labelled with their value."""
    frame = frame_of(summary, "by_step")
    if frame.height == 0 or "total_us" not in frame.columns:
        return None
    if "step" in frame.columns and frame["step"].null_count() < frame.height:
        frame = frame.filter(pl.col("step").is_not_null())  # epoch-only regions are not steps
    rows = frame.head(limit).to_dicts()
    axes = _StepAxes(rows, 210.0)
    if axes.scale <= 0:
        return None
    bars, cut = [], 0
    for i, r in enumerate(rows):
        total, ops = _num(r.get("total_us")), _num(r.get("op_us"))
        clipped = total > axes.scale
        cut += clipped
        h_total, h_ops = axes.y(total), (axes.y(min(ops, total)) if total else 0.0)
        x = axes.x(i)
        name = _step_label(r.get("epoch"), r.get("step"), i)
        bars.append(
            {
                "x": round(x, 2),
                "w": round(axes.bar_w, 2),
                "cx": round(x + axes.bar_w / 2, 2),
                "y_total": round(axes.base - h_total, 2),
                "h_total": round(h_total, 2),
                "y_ops": round(axes.base - h_ops, 2),
                "h_ops": round(h_ops, 2),
                "clipped": clipped,
                "value": fmt_us(total),
                "title": f"{name}: wall {fmt_us(total)}, op time {fmt_us(ops)}",
            }
        )
    return {
        "width": axes.width,
        "height": axes.height,
        "pad_left": axes.pad_left,
        "base_y": axes.base,
        "top_y": axes.top,
        "bars": bars,
        "ticks": axes.ticks(),
        "xlabels": axes.xlabels(),
        "cut": cut,
        "epoch_labels": len(axes.epochs) > 1,
        "more": max(0, frame.height - len(rows)),
    }


# the step parts bottom to top in a step's bar: compile last, so that a bar cut at the top (a first step that
# compiles) loses compile time, not the parts a reader compares
_STACK_ORDER = ("data", "forward", "eval", "backward", "optimizer", "io", "comm", "other", "compile")
_PART_LABELS = dict(STEP_PARTS)


def _step_label(epoch: Any, step: Any, i: int) -> str:
    parts = (f"epoch {epoch}" if not is_missing(epoch) else "", f"step {step}" if not is_missing(step) else "")
    return " ".join(p for p in parts if p) or f"#{i}"


def _steps_view(summary: Summary, limit: int = 400) -> dict | None:
    """The per-step breakdown section: a stacked bar per step (one colour per part), the legend with each
    part's total and share, the statistics over the steps, the slowest steps and why, the table of steps.
    None when the summary has no step parts (no steps, or a Summary from before them)."""
    frame = frame_of(summary, "by_step")
    stats = frame_of(summary, "step_stats")
    parts = [p for p in _STACK_ORDER if f"{p}_us" in frame.columns]
    if frame.height == 0 or stats.height == 0 or not parts:
        return None
    if "step" in frame.columns and frame["step"].null_count() < frame.height:
        frame = frame.filter(pl.col("step").is_not_null())  # epoch-only regions are not steps
    by_part = {r["part"]: r for r in stats.iter_rows(named=True)}
    slow = {(r.get("epoch"), r.get("step")): r for r in frame_of(summary, "slow_steps").iter_rows(named=True)}
    rows = frame.head(limit).to_dicts()
    axes = _StepAxes(rows, 230.0)
    if axes.scale <= 0:
        return None
    scale, base = axes.scale, axes.base
    bars, cut = [], 0
    for i, r in enumerate(rows):
        total = _num(r.get("total_us"))
        x = axes.x(i)
        segs, level = [], 0.0
        for p in parts:
            v = _num(r.get(f"{p}_us"))
            lo, hi = min(level, scale), min(level + v, scale)
            level += v
            if hi > lo:
                top, bottom = axes.y(hi), axes.y(lo)
                segs.append({"cls": f"sp-{p}", "y": round(base - top, 2), "h": round(top - bottom, 2)})
        clipped = total > scale
        cut += clipped
        name = _step_label(r.get("epoch"), r.get("step"), i)
        spent = ", ".join(f"{_PART_LABELS[p]} {fmt_us(r.get(f'{p}_us'))}" for p, _ in STEP_PARTS
                          if p in parts and _num(r.get(f"{p}_us")) > 0)  # fmt: skip
        why = slow.get((r.get("epoch"), r.get("step")))
        title = f"{name}: wall {fmt_us(total)} · {spent}" + (f" · {why['why']}" if why else "")
        bars.append({
            "x": round(x, 2), "w": round(axes.bar_w, 2), "cx": round(x + axes.bar_w / 2, 2), "segs": segs,
            "clipped": clipped, "top": round(base - axes.y(total), 2), "value": fmt_us(total), "title": title,
        })  # fmt: skip
    legend = [
        {"cls": f"sp-{p}", "label": label, "total": fmt_us(by_part[p]["total_us"]),
         "share": fmt_share(by_part[p]["share"]), "median": fmt_us(by_part[p]["median_us"]),
         "p95": fmt_us(by_part[p]["p95_us"])}
        for p, label in STEP_PARTS if p in by_part and p in parts and by_part[p]["total_us"]
    ]  # fmt: skip
    wall = by_part.get("total", {})
    slowest = [
        {"name": _step_label(r.get("epoch"), r.get("step"), 0), "total": fmt_us(r.get("total_us")),
         "over": fmt_us(r.get("over_us")), "why": r.get("why") or ""}
        for r in frame_of(summary, "slow_steps").iter_rows(named=True)
    ]  # fmt: skip
    spec = SPEC_BY_ATTR["by_step"]
    table = _table_view(summary, "by_step", None, TableSpec(spec.attr, "Steps", tuple(step_cols(summary))))
    return {
        "n": frame.height,
        "median": fmt_us(wall.get("median_us")),
        "p95": fmt_us(wall.get("p95_us")),
        "chart": {
            "width": axes.width, "height": axes.height, "pad_left": axes.pad_left, "base_y": base, "bars": bars,
            "ticks": axes.ticks(), "xlabels": axes.xlabels(), "cut": cut, "epoch_labels": len(axes.epochs) > 1,
            "more": max(0, frame.height - len(rows)),
        },
        "legend": legend,
        "slowest": slowest,
        "table": table,
    }  # fmt: skip


def _files_view(summary: Summary, limit: int) -> dict | None:
    """The file I/O section: the program's files first, then the other files with I/O outside compile
    phases, then one row per group (Python's imports, dynascope, compiler caches and pipes); a line for
    the single files touched only while compiling, and the headline's (the compiler pipes' waiting is
    not counted as I/O). None without file I/O events."""
    view = file_view(summary, limit)
    if view is None:
        return None
    spec = TableSpec("by_file", SPEC_BY_ATTR["by_file"].title, tuple(view.cols))
    table = _table_view(summary, "by_file", limit, spec, view.frame)
    return {"table": table, "line": compile_files_line(view), "io": io_line(view).splitlines(), "title": spec.title}


def _costs_view(summary: Summary, limit: int) -> dict | None:
    """Graph breaks and recompiles by cost (each with its line, reason, fix and torch's details), the
    compiled functions and the comparison with the eager run. None when the trace has none of them."""
    breaks = [_cost_item(r, "graph_breaks") for r in frame_of(summary, "graph_breaks").head(limit).to_dicts()]
    recompiles = [_cost_item(r, "recompiles") for r in frame_of(summary, "recompiles").head(limit).to_dicts()]
    functions = _table_view(summary, "compiled_functions", limit)
    vs_eager = _table_view(summary, "vs_eager", None)
    if not (breaks or recompiles or functions or vs_eager):
        return None
    return {"breaks": breaks, "recompiles": recompiles, "functions": functions, "vs_eager": vs_eager,
            "break_total": fmt_us(sum(_num(r.get("total_us")) for r in frame_of(summary, "graph_breaks").to_dicts()
                                      if r.get("measurable")))}  # fmt: skip


def _cost_item(row: dict, attr: str) -> dict:
    """One graph break or recompile as the HTML shows it: numbers formatted, the line's code, the fix."""
    measurable = attr == "recompiles" or bool(row.get("measurable"))
    numbers = [
        ("hits" if attr == "graph_breaks" else "recompiles", fmt_value(row.get("calls"), "int")),
        ("per call" if attr == "graph_breaks" else "each", fmt_us(row.get("per_call_us")) if measurable else "–"),
        ("per step", fmt_us(row.get("per_step_us")) if measurable else "–"),
        ("total" if attr == "graph_breaks" else "compile time", fmt_us(row.get("total_us")) if measurable else "–"),
    ]
    if attr == "graph_breaks":
        numbers.append(("of the call", fmt_share(row.get("share")) if measurable else "–"))
    return {
        "source": row.get("source") or "(unknown line)", "reason": row.get("reason") or "", "fix": row.get("fix") or "",
        "code": row.get("code") or "", "note": row.get("note") or "", "detail": row.get("detail") or "",
        "function": row.get("function") or "", "kind": row.get("kind") or "", "library": row.get("library") or "",
        "compile_ids": ", ".join(row.get("compile_ids") or []), "numbers": numbers,
        "warmup": fmt_us(row.get("warmup_us")) if row.get("warmup_us") else "",
    }  # fmt: skip


def _break_costs(summary: Summary) -> dict[tuple, str]:
    """Each graph break's run-time cost in a few words, by (file, line) and by compile id, for the
    explanation's list of breaks (it shows them beside their source excerpt)."""
    out: dict[tuple, str] = {}
    for r in frame_of(summary, "graph_breaks").iter_rows(named=True):
        if not r.get("calls"):
            text = r.get("note") or "not hit while traced"
        elif not r.get("measurable"):
            text = "nothing measurable"
        else:
            text = (f"{fmt_us(r.get('per_call_us'))} per call ({fmt_share(r.get('share'))}), "
                    f"{fmt_us(r.get('total_us'))} in all")
        out.setdefault(("line", r.get("file"), r.get("line")), text)
        for cid in r.get("compile_ids") or []:
            out.setdefault(("id", cid), text)
    return out


def _process_chart(summary: Summary, limit: int = 64) -> dict | None:
    """Op time and compile time per process (rank), when there is more than one: stragglers stand out."""
    frame = frame_of(summary, "by_process")
    if frame.height < 2:
        return None
    rows = frame.head(limit).to_dicts()
    totals = [_num(r.get("op_us")) + _num(r.get("compile_us")) for r in rows]
    peak = max(totals, default=0.0)
    if peak <= 0:
        return None
    bars = []
    for r, total in zip(rows, totals, strict=True):
        rank = r.get("rank")
        parts = [f"rank {rank}" if isinstance(rank, int) and rank >= 0 else None, r.get("host"), f"pid {r.get('pid')}"]
        label = " · ".join(str(p) for p in parts if p not in (None, ""))
        segs = [
            {"cls": cls, "pct": v / peak * 100, "title": f"{name} {fmt_us(v)}"}
            for name, cls, v in (
                ("op time", "k-run", _num(r.get("op_us"))),
                ("compile", "k-compile", _num(r.get("compile_us"))),
            )
            if v > 0
        ]
        bars.append({"label": label, "module": "", "value": fmt_us(total), "segments": segs})
    return {"bars": bars, "more": max(0, frame.height - len(rows))}


def compile_wall_us(summary: Summary) -> dict[str, int]:
    """Each compile id's compile time in the trace (µs): the compile_vs_run rows."""
    cvr = frame_of(summary, "compile_vs_run")
    if not {"kind", "compile_id", "total_us"} <= set(cvr.columns):
        return {}
    return {str(cid): int(us or 0) for kind, cid, us in cvr.select("kind", "compile_id", "total_us").iter_rows()
            if kind == "compile" and cid is not None}  # fmt: skip


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


def _explanation_view(explanation: Report | dict | None, summary: Summary | None = None) -> dict | None:
    """The explanation section: the Report itself (read with the explain model's own from_dict), the
    file it came from, the numbers computed from it, and each graph break's run-time cost from the trace."""
    if explanation is None or not isinstance(explanation, (Report, dict)):
        return None
    report = explanation if isinstance(explanation, Report) else Report.from_dict(explanation)
    path = explanation.get("_path") if isinstance(explanation, dict) else None
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
        from dynascope import __version__

        return __version__
    except Exception:  # noqa: BLE001  # pragma: no cover - a report without a version is still a report
        return "?"


def render_html(
    summary: Summary, explanation: Report | dict | None = None, title: str | None = None, rows: int = HTML_ROWS,
    compile_profile: dict | None = None,
) -> str:
    """The report as one HTML string. `explanation` is a Report, the parsed explanation.json, or None;
    `compile_profile` the parsed compile_profile.json, or None."""
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
    expl = _explanation_view(explanation, summary)
    files = meta_files(summary)
    steps = _steps_view(summary)
    file_io = _files_view(summary, limit)
    order = [*op_tables(summary), "by_layer", "by_device", "gpu_launchers", "by_graph", "cache_entries", "by_step",
             "by_process"]  # fmt: skip
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
    }
    return _env().get_template("report.html.j2").render(**context)


def write_html(
    summary: Summary, out: str | Path, explanation: Report | dict | str | Path | None = None, title: str | None = None,
    compile_profile: dict | str | Path | None = None,
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
    out.write_text(render_html(summary, explanation, title, compile_profile=compile_profile), encoding="utf-8")
    return out


# ------------------------------------------------------------------------------------------------
# many ranks (analyze/ranks.py, docs/ranks.md)

_RANK_SPEC = TableSpec("by_rank", "Per rank", (
    Col("rank", "rank", "id"), Col("host", "host"), Col("pid", "pid", "id"), Col("processes", "processes", "int"),
    Col("steps", "steps", "int"), Col("step_median_us", "median step", "us"), Col("compile_us", "compile", "us"),
    Col("recompiles", "recompiles", "int"), Col("graph_breaks", "graph breaks", "int"),
    Col("graphs", "graphs", "int"), Col("status", "trace"),
))  # fmt: skip
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
        "table": _table_view(summary, "by_rank", None, _RANK_SPEC),
        "heat": heat,
    }


# ----------------------------------------------------------------------------------------------
# collectives across ranks (analyze/comm.py, docs/ranks.md)


def _comm_view(summary: Summary, limit: int = HTML_ROWS) -> dict | None:
    """The hang finding (shown first), the stragglers, the collectives joined across ranks and the clocks;
    None for a trace without collectives."""
    from dynascope.render.terminal import comm_line, hang_text, straggler_lines

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
