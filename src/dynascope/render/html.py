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
from typing import Any, Iterable

import orjson
import polars as pl
from jinja2 import ChainableUndefined, Environment, FileSystemLoader, select_autoescape

from ._fmt import (
    SPEC_BY_ATTR,
    compile_run_totals,
    fmt_share,
    fmt_us,
    fmt_value,
    frame_of,
    is_missing,
    meta_facts,
    meta_files,
    meta_warnings,
    phase_totals,
    summary_top,
    table_rows,
)

__all__ = ["render_html", "write_html", "find_explanation", "load_explanation", "EXPLANATION_FILE"]

EXPLANATION_FILE = "explanation.json"
TEMPLATES = Path(__file__).with_name("templates")
HTML_ROWS = 200  # rows per table in the HTML (the terminal shows Summary.top)
PHASE_ORDER = ("forward", "backward", "inference")


def _env() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(TEMPLATES)),
        autoescape=select_autoescape(enabled_extensions=("html", "j2", "html.j2"), default=True),
        undefined=ChainableUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["us"] = fmt_us
    env.filters["share"] = fmt_share
    env.filters["seconds"] = _fmt_seconds
    return env


def _fmt_seconds(value: Any) -> str:
    if is_missing(value) or not isinstance(value, (int, float)):
        return "–"
    return fmt_us(float(value) * 1e6)


# ----------------------------------------------------------------------------------------- tables


def _sort_key(value: Any, kind: str) -> str:
    if is_missing(value):
        return ""
    if kind != "text":
        try:
            return repr(float(value))
        except (TypeError, ValueError):
            return str(value)
    return str(value)


def _table_view(summary: Any, attr: str, limit: int | None) -> dict | None:
    spec = SPEC_BY_ATTR[attr]
    cols, rows, n = table_rows(summary, spec, limit)
    if not rows:
        return None
    max_total = 0.0
    for row in rows:
        v = row.get("total_us")
        if not is_missing(v):
            max_total = max(max_total, float(v))
    out_rows = []
    for row in rows:
        cells = []
        for col in cols:
            value = row.get(col.key)
            cell = {"text": fmt_value(value, col.kind), "sort": _sort_key(value, col.kind), "kind": col.kind}
            if col.kind == "share" and not is_missing(value):
                cell["bar"] = max(0.0, min(100.0, float(value) * 100))
            if col.key == "total_us" and max_total > 0 and not is_missing(value):
                cell["bar"] = max(0.0, min(100.0, float(value) / max_total * 100))
            if col.key in ("name", "layer", "graph", "host"):
                cell["code"] = True
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


def _phase_chart(summary: Any) -> dict | None:
    phases = phase_totals(summary)
    order = [p for p in PHASE_ORDER if p in phases] + sorted(p for p in phases if p not in PHASE_ORDER)
    return _split_bar([(p, f"ph-{p}" if p in PHASE_ORDER else "ph-other", phases[p]) for p in order])


def _compile_chart(summary: Any) -> dict | None:
    compile_us, run_us = compile_run_totals(summary)
    return _split_bar([("compile", "k-compile", compile_us), ("run", "k-run", run_us)])


def _layer_chart(summary: Any, limit: int = 15) -> dict | None:
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
            for name, cls, v in (("forward", "ph-forward", fwd), ("backward", "ph-backward", bwd), ("other", "ph-inference", other))
            if v > 0
        ]
        label = r.get("layer")
        label = "(none)" if label in (None, "") else str(label)
        mtype = r.get("module_type")
        bars.append({"label": label, "module": "" if mtype in (None, "") else str(mtype), "value": fmt_us(total), "segments": segs})
    return {"bars": bars, "more": max(0, frame.height - len(rows))}


def _step_chart(summary: Any, limit: int = 400) -> dict | None:
    """Columns per step: wall time, with the op time inside it. Outliers (a first step that compiles)
    would flatten the rest, so the scale stops at 5× the typical step and taller bars are cut and
    labelled with their value."""
    frame = frame_of(summary, "by_step")
    if frame.height == 0 or "total_us" not in frame.columns:
        return None
    if "step" in frame.columns and frame["step"].null_count() < frame.height:
        frame = frame.filter(pl.col("step").is_not_null())  # epoch-only regions are not steps
    rows = frame.head(limit).to_dicts()
    totals = sorted(_num(r.get("total_us")) for r in rows)
    peak = totals[-1] if totals else 0.0
    if peak <= 0:
        return None
    typical = totals[(len(totals) * 3) // 4] if len(totals) >= 4 else peak
    scale = min(peak, 5 * typical) if typical > 0 else peak
    width, height, pad_left, pad_bottom, pad_top = 760.0, 210.0, 56.0, 22.0, 18.0
    plot_w, plot_h = width - pad_left - 8, height - pad_bottom - pad_top
    slot = plot_w / len(rows)
    bar_w = min(max(1.0, slot * 0.8), 36.0)
    epochs = {r.get("epoch") for r in rows if not is_missing(r.get("epoch"))}
    bars, cut = [], 0
    for i, r in enumerate(rows):
        total, ops = _num(r.get("total_us")), _num(r.get("op_us"))
        clipped = total > scale
        cut += clipped
        h_total = min(total, scale) / scale * plot_h
        h_ops = min(ops, total, scale) / scale * plot_h if total else 0.0
        x = pad_left + i * slot + (slot - bar_w) / 2
        epoch, step = r.get("epoch"), r.get("step")
        name = " ".join(p for p in (f"epoch {epoch}" if not is_missing(epoch) else "", f"step {step}" if not is_missing(step) else "") if p)
        bars.append(
            {
                "x": round(x, 2),
                "w": round(bar_w, 2),
                "cx": round(x + bar_w / 2, 2),
                "y_total": round(pad_top + plot_h - h_total, 2),
                "h_total": round(h_total, 2),
                "y_ops": round(pad_top + plot_h - h_ops, 2),
                "h_ops": round(h_ops, 2),
                "clipped": clipped,
                "value": fmt_us(total),
                "title": f"{name or f'#{i}'}: wall {fmt_us(total)}, op time {fmt_us(ops)}",
            }
        )
    ticks = [{"y": round(pad_top + plot_h - f * plot_h, 2), "label": fmt_us(scale * f)} for f in (0.0, 0.5, 1.0)]
    step_every = max(1, math.ceil(len(rows) / 14))
    xlabels = []
    for i in range(0, len(rows), step_every):
        epoch, step = rows[i].get("epoch"), rows[i].get("step")
        label = str(i if is_missing(step) else step)
        if len(epochs) > 1 and not is_missing(epoch):
            label = f"{epoch}:{label}"
        xlabels.append({"x": round(pad_left + i * slot + slot / 2, 2), "label": label})
    return {
        "width": width,
        "height": height,
        "pad_left": pad_left,
        "base_y": pad_top + plot_h,
        "top_y": pad_top,
        "bars": bars,
        "ticks": ticks,
        "xlabels": xlabels,
        "cut": cut,
        "epoch_labels": len(epochs) > 1,
        "more": max(0, frame.height - len(rows)),
    }


def _process_chart(summary: Any, limit: int = 64) -> dict | None:
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
    for r, total in zip(rows, totals):
        rank = r.get("rank")
        parts = [f"rank {rank}" if isinstance(rank, int) and rank >= 0 else None, r.get("host"), f"pid {r.get('pid')}"]
        label = " · ".join(str(p) for p in parts if p not in (None, ""))
        segs = [
            {"cls": cls, "pct": v / peak * 100, "title": f"{name} {fmt_us(v)}"}
            for name, cls, v in (("op time", "k-run", _num(r.get("op_us"))), ("compile", "k-compile", _num(r.get("compile_us"))))
            if v > 0
        ]
        bars.append({"label": label, "module": "", "value": fmt_us(total), "segments": segs})
    return {"bars": bars, "more": max(0, frame.height - len(rows))}


def _compile_time_chart(expl: dict | None) -> dict | None:
    if not expl:
        return None
    rows = [ct for ct in expl["compile_times"] if isinstance(ct, dict)]
    if not rows:
        return None
    peak = max((_num(ct.get("total_s")) for ct in rows), default=0.0)
    if peak <= 0:
        return None
    bars = []
    for ct in rows:
        total = _num(ct.get("total_s"))
        known = {k: _num(ct.get(f"{k}_s")) for k in ("dynamo", "aot", "backend", "inductor")}
        # inductor runs inside the backend call: show backend minus inductor, then inductor
        if known["inductor"] and known["backend"] >= known["inductor"]:
            known["backend"] -= known["inductor"]
        rest = max(0.0, total - sum(known.values()))
        segs = [
            {"cls": f"c-{k}", "pct": v / peak * 100, "title": f"{k} {_fmt_seconds(v)}"}
            for k, v in (*known.items(), ("other", rest))
            if v > 0
        ]
        label = f"{ct.get('compile_id') or '?'} {ct.get('function') or ''}".strip()
        bars.append({"label": label, "module": ct.get("status") or "", "value": _fmt_seconds(total), "segments": segs})
    return {"bars": bars, "more": 0}


# ------------------------------------------------------------------------------------ explanation


def find_explanation(trace_paths: Iterable[str | Path]) -> Path | None:
    """`explanation.json` beside the first trace that has one (in its directory, or the directory itself)."""
    for raw in trace_paths:
        p = Path(raw)
        for d in ([p] if p.is_dir() else []) + [p.parent]:
            candidate = d / EXPLANATION_FILE
            if candidate.is_file():
                return candidate
    return None


def load_explanation(path: str | Path) -> dict:
    """Read explanation.json. A file that is not readable JSON becomes a report with one note."""
    path = Path(path)
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        return {"notes": [f"could not read {path}: {exc}"], "_path": str(path)}
    if not isinstance(data, dict):
        return {"notes": [f"{path} does not hold a JSON object; explanation sections skipped"], "_path": str(path)}
    data.setdefault("_path", str(path))
    return data


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _dicts(value: Any) -> list[dict]:
    return [v for v in _list(value) if isinstance(v, dict)]


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode() if isinstance(value, (dict, list)) else str(value)


def _where(obj: dict) -> str:
    file, line = obj.get("file"), obj.get("line")
    if not file:
        return ""
    return f"{file}:{line}" if line not in (None, "") else str(file)


def _norm_explanation(e: Any, depth: int = 0) -> dict | None:
    if not isinstance(e, dict) or depth > 8:
        return None
    fn = e.get("function") if isinstance(e.get("function"), dict) else {}
    entries = []
    for ce in _dicts(e.get("cache_entries")):
        groups = []
        for g in _dicts(ce.get("guards")):
            guards = []
            for gd in _dicts(g.get("guards")):
                ul = gd.get("user_line") if isinstance(gd.get("user_line"), dict) else None
                guards.append(
                    {
                        "kind": _text(gd.get("kind")),
                        "text": _text(gd.get("text")),
                        "raw": _text(gd.get("raw")),
                        "where": _where(ul) if ul else "",
                        "code": _text(ul.get("code")) if ul else "",
                        "fail_count": gd.get("fail_count"),
                    }
                )
            groups.append({"subject": _text(g.get("subject")), "source": _text(g.get("source")), "guards": guards})
        code = ce.get("code") if isinstance(ce.get("code"), dict) else {}
        resumes = []
        for r in _dicts(ce.get("resume_functions")):
            resumes.append(
                {
                    "name": _text(r.get("name")),
                    "code_name": _text(r.get("code_name")),
                    "offset": r.get("offset"),
                    "line": r.get("line"),
                    "source": _text(r.get("source")),
                    "explanation": _norm_explanation(r.get("explanation"), depth + 1),
                }
            )
        entries.append(
            {
                "index": ce.get("index"),
                "compile_id": _text(ce.get("compile_id")),
                "backend": _text(ce.get("backend")),
                "guard_count": ce.get("guard_count"),
                "groups": groups,
                "code_name": _text(code.get("name")),
                "code": _text(code.get("source")),
                "decompiled": bool(code.get("decompiled")),
                "subgraphs": [
                    {
                        "name": _text(s.get("name")),
                        "global_name": _text(s.get("global_name")),
                        "fx_code": _text(s.get("fx_code")),
                        "op_count": s.get("op_count"),
                        "node_count": s.get("node_count"),
                    }
                    for s in _dicts(ce.get("subgraphs"))
                ],
                "resumes": resumes,
            }
        )
    return {
        "name": _text(fn.get("qualname") or fn.get("name")) or "(unknown function)",
        "where": _where(fn),
        "kind": _text(e.get("kind")) or "function",
        "source": _text(e.get("source")),
        "entries": entries,
        "n_breaks": len(_list(e.get("graph_breaks"))),
        "n_recompiles": len(_list(e.get("recompiles"))),
        "notes": [_text(n) for n in _list(e.get("notes"))],
    }


def _explanation_view(data: dict | None) -> dict | None:
    if not isinstance(data, dict):
        return None
    breaks = [
        {
            "reason": _text(b.get("reason")),
            "detail": _text(b.get("detail")),
            "function": _text(b.get("function")),
            "where": _where(b),
            "excerpt": _text(b.get("excerpt")),
            "count": b.get("count"),
            "compile_ids": ", ".join(_text(c) for c in _list(b.get("compile_ids"))),
        }
        for b in _dicts(data.get("graph_breaks"))
    ]
    recompiles = [
        {
            "function": _text(r.get("function")),
            "where": _where(r),
            "compile_id": _text(r.get("compile_id")),
            "reason": _text(r.get("reason")),
            "failures": [
                {k: _text(f.get(k)) for k in ("compile_id", "reason", "subject", "expected", "actual")}
                for f in _dicts(r.get("failures"))
            ],
        }
        for r in _dicts(data.get("recompiles"))
    ]
    compile_times = _dicts(data.get("compile_times"))
    view = {
        "path": _text(data.get("_path")),
        "schema": _text(data.get("schema")),
        "torch_version": _text(data.get("torch_version")),
        "python_version": _text(data.get("python_version")),
        "script": _text(data.get("script")),
        "error": _text(data.get("error")),
        "notes": [_text(n) for n in _list(data.get("notes"))],
        "functions": [x for x in (_norm_explanation(e) for e in _list(data.get("explanations"))) if x],
        "graph_breaks": breaks,
        "recompiles": recompiles,
        "compile_times": compile_times,
        "cache_limit_hits": [
            {"function": _text(h.get("function")), "where": _where(h), "limit": h.get("limit"), "reason": _text(h.get("reason"))}
            for h in _dicts(data.get("cache_limit_hits"))
        ],
        "eager_fallbacks": [
            {"function": _text(h.get("function")), "where": _where(h), "compile_id": _text(h.get("compile_id")), "reason": _text(h.get("reason"))}
            for h in _dicts(data.get("eager_fallbacks"))
        ],
    }
    view["compile_total_s"] = sum(_num(ct.get("total_s")) for ct in compile_times)
    view["compile_chart"] = _compile_time_chart(view)
    return view


# ----------------------------------------------------------------------------------------- public


def _version() -> str:
    try:
        from .. import __version__

        return __version__
    except Exception:  # pragma: no cover
        return "?"


def render_html(summary: Any, explanation: dict | None = None, title: str | None = None, rows: int = HTML_ROWS) -> str:
    """The report as one HTML string. `explanation` is the parsed explanation.json (or None)."""
    top = summary_top(summary)
    limit = max(top, rows)
    tables = {attr: _table_view(summary, attr, None if not spec.limit_to_top else limit) for attr, spec in SPEC_BY_ATTR.items()}
    compile_us, run_us = compile_run_totals(summary)
    phases = phase_totals(summary)
    cards = [{"label": label, "value": value} for label, value in meta_facts(summary)]
    if compile_us or run_us:
        cards.append({"label": "compile", "value": fmt_us(compile_us)})
        cards.append({"label": "run", "value": fmt_us(run_us)})
    if phases.get("forward") and phases.get("backward"):
        cards.append({"label": "backward / forward", "value": f"{phases['backward'] / phases['forward']:.2f}×"})
    expl = _explanation_view(explanation)
    files = meta_files(summary)
    context = {
        "title": title or "trace report",
        "nonce": secrets.token_urlsafe(16),
        "version": _version(),
        "generated": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cards": cards,
        "files": files,
        "warnings": meta_warnings(summary),
        "tables": tables,
        "top_table_order": ["by_op", "by_layer", "by_graph", "by_step", "by_process"],
        "charts": {
            "compile": _compile_chart(summary),
            "phase": _phase_chart(summary),
            "layers": _layer_chart(summary),
            "steps": _step_chart(summary),
            "processes": _process_chart(summary),
        },
        "expl": expl,
    }
    return _env().get_template("report.html.j2").render(**context)


def write_html(
    summary: Any, out: str | Path, explanation: dict | str | Path | None = None, title: str | None = None
) -> Path:
    """Write the report to `out`; `explanation` may be a parsed dict or the path of explanation.json."""
    if isinstance(explanation, (str, Path)):
        explanation = load_explanation(explanation)
    out = Path(out)
    if out.parent and not out.parent.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_html(summary, explanation, title), encoding="utf-8")
    return out
