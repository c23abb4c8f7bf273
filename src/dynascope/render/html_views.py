"""The HTML report's views of a Summary: its tables (sortable, cut to a row count), the phase, compile, layer,
process and step charts, the step breakdown, and the file and cost sections (render/html.py puts them on
the page)."""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from dynascope.analyze.summary import Summary
from dynascope.render._fmt import (
    compile_files_line,
    compile_run_totals,
    file_view,
    fmt_bytes,
    fmt_share,
    fmt_us,
    fmt_value,
    frame_of,
    io_line,
    is_missing,
    phase_totals,
    step_cols,
    table_rows,
)
from dynascope.render.table_specs import SPEC_BY_ATTR, STEP_PARTS, TableSpec

KERNEL_CODE_ROWS = 60  # kernels whose code the HTML shows (the slowest first)
PHASE_ORDER = ("forward", "backward", "inference")


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


def _memory_line(summary: Summary, axes: _StepAxes) -> dict | None:
    """Each step's peak memory (memory_by_step, the highest rank's), as a line over the step bars on its own
    scale, from the lowest peak to the highest (labelled at the right); None without memory samples."""
    memory = frame_of(summary, "memory_by_step")
    if memory.height == 0:
        return None
    peaks = dict(memory.group_by("step").agg(pl.col("peak_max").max()).iter_rows())
    points = [(i, float(peaks[r.get("step")])) for i, r in enumerate(axes.rows) if peaks.get(r.get("step")) is not None]
    if len(points) < 2:
        return None
    low, high = min(v for _, v in points), max(v for _, v in points)
    span = (high - low) or 1.0

    def y(v: float) -> float:
        return round(axes.top + (1 - (v - low) / span) * axes.plot_h * 0.9, 2)

    xy = [(round(axes.x(i) + axes.bar_w / 2, 2), y(v)) for i, v in points]
    return {
        "points": " ".join(f"{x},{yy}" for x, yy in xy),
        "dots": [{"x": x, "y": yy, "title": f"step {axes.rows[i].get('step')}: peak memory {fmt_bytes(v)}"}
                 for (x, yy), (i, v) in zip(xy, points, strict=True)],
        "labels": [{"y": y(high) + 3, "label": fmt_bytes(high)}, {"y": y(low) + 3, "label": fmt_bytes(low)}],
        "x": axes.width - 6,
    }  # fmt: skip


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
            "more": max(0, frame.height - len(rows)), "memory": _memory_line(summary, axes),
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
