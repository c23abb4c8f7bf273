"""Graph breaks and recompiles by cost, compiled functions and cache entries: Summary tables built from
the trace's frame tables (analyze/breaks.py), joined with explanation.json where there is one.

The trace alone knows each break's hits and cost, the line that caused it and torch's reason (recorded
when the frame was compiled), each compiled function's calls, and each compile id's compile time. The
explanation adds what only the compile saw: why a function ran eagerly, which guard failed at each
recompile and the user line behind it, torch's hints, and breaks that never ran. It comes as the typed
Report of artifacts/explanation.py (the model of docs/explain-format.md; this package does not import the
explain side).

Costs are of the steady state. A warm-up call, one that compiled something or ran a cache entry for the
first time, holds first-run work that no compile event covers (a graph's first call sets up its runtime
wrappers); its break time is kept apart as `warmup_us`. Where every call was a warm-up, its numbers are
all there are, and `warmup_only` says so.

Every row of `graph_breaks` and `recompiles` has `source` ("file.py:LINE", the user line to change),
`calls` (how many times it happened), `total_us`, `per_call_us` (per call of the compiled function that
holds it), `per_step_us` (where the trace has steps), `reason` and `fix` (analyze/fixes.py).
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from typing import Any

import polars as pl

from dynascope.analyze import breaks
from dynascope.analyze.fixes import break_fix, fallback_fix, recompile_fix
from dynascope.artifacts.explanation import CacheEntry, GraphBreak, Recompile, Report
from dynascope.userframes import is_library_file, library_text

__all__ = ["COST_TABLES", "cost_tables"]

COST_TABLES = ("graph_breaks", "recompiles", "compiled_functions", "cache_entries")
RESOLUTION_US = 2  # a hit is bounded by two readings written in whole µs: less per hit is not measurable

_Schema = dict[str, pl.DataType | type[pl.DataType]]
_BREAK_SCHEMA: _Schema = {
    "source": pl.String, "reason": pl.String, "fix": pl.String, "calls": pl.Int64, "total_us": pl.Int64,
    "per_call_us": pl.Float64, "per_step_us": pl.Float64, "per_hit_us": pl.Float64, "share": pl.Float64,
    "kind": pl.String, "function": pl.String, "file": pl.String, "line": pl.Int64, "code": pl.String,
    "compile_ids": pl.List(pl.String), "warmup_calls": pl.Int64, "warmup_us": pl.Int64, "warmup_only": pl.Boolean,
    "measurable": pl.Boolean, "note": pl.String, "detail": pl.String, "library": pl.String,
}  # fmt: skip
_RECOMPILE_SCHEMA: _Schema = {
    "source": pl.String, "reason": pl.String, "fix": pl.String, "calls": pl.Int64, "total_us": pl.Int64,
    "per_call_us": pl.Float64, "per_step_us": pl.Float64, "function": pl.String, "file": pl.String,
    "line": pl.Int64, "code": pl.String, "subject": pl.String, "compile_ids": pl.List(pl.String),
    "library": pl.String,
}  # fmt: skip
_FUNCTION_SCHEMA: _Schema = {
    "function": pl.String, "source": pl.String, "calls": pl.Int64, "per_call_us": pl.Float64,
    "median_us": pl.Int64, "p25_us": pl.Int64, "p75_us": pl.Int64, "steady_calls": pl.Int64,
    "graph_us": pl.Float64, "break_us": pl.Float64, "fallback_us": pl.Float64, "overhead_us": pl.Float64,
    "total_us": pl.Int64, "first_call_us": pl.Int64, "compile_us": pl.Int64, "compiles": pl.Int64,
    "warmup_calls": pl.Int64, "file": pl.String, "line": pl.Int64,
}  # fmt: skip
_ENTRY_SCHEMA: _Schema = {
    "compile_id": pl.String, "function": pl.String, "kind": pl.String, "source": pl.String, "calls": pl.Int64,
    "total_us": pl.Int64, "per_call_us": pl.Float64, "graph_us": pl.Int64, "compile_us": pl.Int64,
    "file": pl.String, "line": pl.Int64,
}  # fmt: skip


def cost_tables(p: Any, steps: int, explanation: Report | None,
                library_frames: bool = False) -> dict[str, pl.DataFrame]:  # fmt: skip
    """The four tables (COST_TABLES) of a merged Partial `p`; `steps`: how many steps the trace has;
    `library_frames`: charge to the library's own lines, not the first user frame (`--library-frames`)."""
    expl = _Explained(explanation, library_frames)
    compile_us = {r["compile_id"]: int(r["total_us"] or 0) for r in p.compile.iter_rows(named=True)}
    tops = _tops(p.calls)
    functions = _functions(p, tops, compile_us)
    return {
        "graph_breaks": _graph_breaks(p.brk, tops, steps, expl,
                                      breaks.ddp_split_rows(p.graph, p.entry, explanation, steps)),
        "recompiles": _recompiles(p, tops, steps, compile_us, expl),
        "compiled_functions": functions,
        "cache_entries": _entries(p.entry, compile_us, expl),
    }


def source_of(file: str | None, line: int | None) -> str | None:
    """"file.py:LINE" as the tables name a line."""
    if not file:
        return None
    return f"{os.path.basename(file)}:{line}" if line else os.path.basename(file)


# ------------------------------------------------------------------------------------------------
# compiled functions (the calls of what torch.compile wrapped, or of top-level compiled frames)


class _Top:
    """One compiled function's calls: steady and warm-up."""

    def __init__(self) -> None:
        self.steady: dict[str, Any] = defaultdict(int)
        self.warm: dict[str, Any] = defaultdict(int)


def _tops(calls: pl.DataFrame) -> dict[tuple, _Top]:
    out: dict[tuple, _Top] = defaultdict(_Top)
    for r in calls.iter_rows(named=True):
        top = out[(r["qualname"], r["file"], r["line"])]
        side = top.warm if r["warmup"] else top.steady
        for k in ("calls", "wall_us", "graph_us", "compile_us", "break_us", "fallback_calls", "fallback_us",
                  "overhead_us"):  # fmt: skip
            side[k] += int(r[k] or 0)
        side["function"] = r["function"]
    return out


def _call_quantiles(hist: pl.DataFrame) -> dict[tuple, dict[str, int | None]]:
    """Per function: p25, median and p75 of its steady calls (nearest rank), and its longest warm-up call
    (the first, that compiled)."""
    out: dict[tuple, dict[str, int | None]] = {}
    if hist.height == 0:
        return out
    for key, g in hist.group_by(["qualname", "file", "line"], maintain_order=True):
        steady = g.filter(pl.col("warmup") == 0).sort("dur")
        found: dict[str, int | None] = {"p25_us": None, "median_us": None, "p75_us": None}
        if steady.height:
            cum = steady.get_column("n").cum_sum()
            total = int(cum[-1])
            for name, pct in (("p25_us", 25), ("median_us", 50), ("p75_us", 75)):
                rank = max(1, -(-total * pct // 100))
                found[name] = int(steady.filter(cum >= rank).get_column("dur")[0])
        warm = g.filter(pl.col("warmup") == 1)
        found["first_call_us"] = int(warm.get_column("dur").max()) if warm.height else None  # type: ignore[arg-type]
        out[tuple(key)] = found
    return out


def _functions(p: Any, tops: dict[tuple, _Top], compile_us: dict[str, int]) -> pl.DataFrame:
    quantiles = _call_quantiles(p.call_hist)
    ids: dict[tuple, set[str]] = defaultdict(set)
    for r in p.fn_ids.iter_rows(named=True):
        ids[(r["qualname"], r["file"], r["line"])].add(r["compile_id"])
    rows = []
    for key, top in tops.items():
        side = top.steady if top.steady["calls"] else top.warm
        n = side["calls"] or 1
        mine = ids.get(key, set())
        q = quantiles.get(key, {})
        rows.append({
            "function": key[0], "source": source_of(key[1], key[2]),
            "calls": top.steady["calls"] + top.warm["calls"],
            "per_call_us": side["wall_us"] / n, "median_us": q.get("median_us"), "p25_us": q.get("p25_us"),
            "p75_us": q.get("p75_us"), "steady_calls": top.steady["calls"],
            "graph_us": side["graph_us"] / n, "break_us": side["break_us"] / n,
            "fallback_us": side["fallback_us"] / n, "overhead_us": side["overhead_us"] / n,
            "total_us": top.steady["wall_us"] + top.warm["wall_us"], "first_call_us": q.get("first_call_us"),
            "compile_us": sum(compile_us.get(c, 0) for c in mine), "compiles": len({_base_id(c) for c in mine}),
            "warmup_calls": top.warm["calls"], "file": key[1], "line": key[2],
        })  # fmt: skip
    frame = pl.DataFrame(rows, schema=_FUNCTION_SCHEMA)
    return frame.sort(["total_us", "function"], descending=[True, False], nulls_last=True)


NO_ENTRY_KIND = "none"  # the kind of cache_entries' last row: the compiles that left no entry


def _entries(entry: pl.DataFrame, compile_us: dict[str, int], expl: _Explained) -> pl.DataFrame:
    """One row per cache entry that ran: its calls (all), and its time per steady call (warm-up calls when
    it has no other). The compile time of compiles that left no cache entry that ran (one that failed; a
    code object Dynamo skipped, as a resume function with no ops after its break; an entry never run) is
    one last row, kind NO_ENTRY_KIND, naming their ids, so that the rows add up to the compile total."""
    runs: dict[tuple, dict[int, dict]] = defaultdict(dict)
    for r in entry.iter_rows(named=True):
        runs[(r["compile_id"], r["qualname"], r["file"], r["line"], r["resume"])][int(r["warmup"] or 0)] = r
    rows = []
    for (cid, name, file, line, resume), sides in runs.items():
        calls = sum(int(r["calls"] or 0) for r in sides.values())
        side = sides.get(0) or sides[1]
        n = int(side["calls"] or 0)
        rows.append({
            "compile_id": cid, "function": _readable(name), "kind": "resume function" if resume else "function",
            "source": source_of(file, line), "calls": calls,
            "total_us": sum(int(r["wall_us"] or 0) for r in sides.values()),
            "per_call_us": int(side["wall_us"] or 0) / n if n else None,
            "graph_us": sum(int(r["graph_us"] or 0) for r in sides.values()), "compile_us": compile_us.get(cid),
            "file": file, "line": line,
        })  # fmt: skip
    frame = pl.DataFrame(rows, schema=_ENTRY_SCHEMA)
    frame = frame.with_columns(pl.col("compile_id").map_elements(_id_order, return_dtype=pl.String).alias("_o")).sort(
        "_o").drop("_o")
    listed = {r["compile_id"] for r in rows}
    missing = sorted((cid for cid in compile_us if cid and cid not in listed), key=_id_order)
    if missing and frame.height > 0:  # (a trace without frame probes has no entry rows at all: nothing to complete)
        failed = [str(t.compile_id) for t in expl.times if t.status == "failed"]
        failed = [cid for cid in missing if cid in failed]
        why = f" ({', '.join(failed)} failed)" if failed else ""
        extra = pl.DataFrame([{
            "compile_id": ", ".join(missing), "function": f"no cache entry{why}", "kind": NO_ENTRY_KIND,
            "calls": 0, "compile_us": sum(compile_us[cid] for cid in missing),
        }], schema=_ENTRY_SCHEMA)  # fmt: skip
        frame = pl.concat([frame, extra])
    return frame


def _id_order(cid: str | None) -> str:
    nums = [int(x) for x in re.findall(r"\d+", cid or "")]
    return ".".join(f"{n:08d}" for n in nums)


def _base_id(cid: str) -> str:
    """A compile id without its restart attempt ("3/0_1" -> "3/0")."""
    return cid.split("_", 1)[0]


# ------------------------------------------------------------------------------------------------
# graph breaks


def _site(r: dict) -> tuple:
    """(file, line, reason) a break row is charged to: its first user frame (or its line in the frame)."""
    if r["break_at"] is not None:
        return (r["break_file"], r["break_at"], r["reason"])
    return (r["file"], r["break_line"], r["reason"])


def _split_line(text: str | None) -> tuple[str, int] | None:
    """"path:LINE" -> (path, LINE)."""
    m = re.match(r"^(.*):(\d+)$", text or "")
    return (m.group(1), int(m.group(2))) if m else None


def _graph_breaks(brk: pl.DataFrame, tops: dict[tuple, _Top], steps: int, expl: _Explained,
                  ddp: list[dict] | None = None) -> pl.DataFrame:
    """One row per break site: the line where the break happened, whichever frame split at it. A break inside
    a library splits the user's frame at the user line that called into it (charged there, the library line
    its detail), and where Dynamo then compiles the library function as a frame of its own, that frame at
    the library line: the same break. `ddp`: the rows of graphs DDPOptimizer split at DDP's buckets (not
    breaks: kind "ddp split", analyze/breaks.py ddp_split_rows)."""
    sites: dict[tuple, dict[str, Any]] = {}
    for r in brk.iter_rows(named=True):
        here = _site(r)
        lib = _split_line(r.get("break_library"))
        site = sites.setdefault((*lib, r["reason"]) if lib else here, {
            "ids": set(), "frames": [], "code": None, "tops": set(), "hits": 0, "us": 0, "warm_hits": 0, "warm_us": 0,
            "user": None, "user_code": None})  # fmt: skip
        if lib is not None and site["user"] is None:
            site["user"], site["user_code"] = here, r["break_code"]
        site["ids"].add(r["compile_id"])
        if r["qualname"] not in site["frames"]:
            site["frames"].append(r["qualname"])
        if lib is None:
            site["code"] = site["code"] or r["break_code"]
        site["tops"].add((r["top_qualname"], r["top_file"], r["top_line"]))
        if r["warmup"]:
            site["warm_hits"] += int(r["hits"] or 0)
            site["warm_us"] += int(r["total_us"] or 0)
        else:
            site["hits"] += int(r["hits"] or 0)
            site["us"] += int(r["total_us"] or 0)
    for key, site in list(sites.items()):
        site["library"] = None
        user = site["user"]
        if user is not None and not expl.library_frames and user not in sites:  # the user's line, the library's
            site["library"] = library_text(key[0], key[1])  # beside it
            site["code"] = site["user_code"]
            sites[user] = sites.pop(key)
        elif site["code"] is None:
            site["code"] = expl.code_at(key[0], key[1])
    rows = [_break_row(key, site, tops, steps, expl) for key, site in sites.items()]
    rows += _fallback_rows(tops, steps, expl)
    by_site = {(r["file"], r["line"]): r for r in rows}
    for row in expl.unseen_breaks({cid for site in sites.values() for cid in site["ids"]}):
        same = by_site.get((row["file"], row["line"]))
        if same is not None:  # the break behind a costed row (an eager function's, say): one row a site
            same["compile_ids"] = sorted(set(same["compile_ids"] or []) | set(row["compile_ids"]), key=_id_order)
            same["detail"] = same["detail"] or row["detail"]
            continue
        by_site[(row["file"], row["line"])] = row
        rows.append(row)
    rows += ddp or []
    frame = pl.DataFrame(rows, schema=_BREAK_SCHEMA)
    return frame.sort(["total_us", "warmup_us", "source"], descending=[True, True, False], nulls_last=True)


def _per_call(total: int, tops: set[tuple], all_tops: dict[tuple, _Top], steady: bool, steps: int) -> tuple:
    """(per_call_us, per_step_us, share) of `total` µs spent in calls of the functions `tops`."""
    sides = [(all_tops[t].steady if steady else all_tops[t].warm) for t in tops if t in all_tops]
    calls = sum(s["calls"] for s in sides)
    wall = sum(s["wall_us"] for s in sides)
    every = sum(all_tops[t].steady["calls"] + all_tops[t].warm["calls"] for t in tops if t in all_tops)
    per_call = total / calls if calls else None
    per_step = per_call * every / steps if per_call is not None and steps else None
    share = total / wall if wall else None
    return per_call, per_step, share


def _break_row(key: tuple, site: dict, tops: dict[tuple, _Top], steps: int, expl: _Explained) -> dict:
    file, line, reason = key
    warm_only = site["hits"] == 0 and site["warm_hits"] > 0
    hits, total = (site["warm_hits"], site["warm_us"]) if warm_only else (site["hits"], site["us"])
    per_call, per_step, share = _per_call(total, site["tops"], tops, not warm_only, steps)
    per_hit = total / hits if hits else None
    measurable = per_hit is not None and per_hit >= RESOLUTION_US
    detail = expl.detail_for(site["ids"], file, line)
    note = None
    if not hits:
        note = "not hit while traced"
    elif not measurable:
        note = f"costs nothing measurable (under {RESOLUTION_US} µs a hit)"
    elif warm_only:
        note = "every call compiled: warm-up included"
    return {
        "source": source_of(file, line), "reason": reason or "graph break",
        "fix": break_fix(reason, site["code"], detail, where=str(file or "")),
        "calls": hits, "total_us": total, "per_call_us": per_call, "per_step_us": per_step,
        "per_hit_us": per_hit, "share": share, "kind": "graph break",
        "function": ", ".join(_readable(f) or "" for f in site["frames"]), "file": file, "line": line,
        "code": site["code"],
        "compile_ids": sorted(site["ids"], key=_id_order), "warmup_calls": site["warm_hits"],
        "warmup_us": site["warm_us"], "warmup_only": warm_only, "measurable": measurable, "note": note,
        "detail": detail, "library": site["library"],
    }  # fmt: skip


def _fallback_rows(tops: dict[tuple, _Top], steps: int, expl: _Explained) -> list[dict]:
    """A function Dynamo ran eagerly costs its whole eager time: one row per such function."""
    rows = []
    for key, top in tops.items():
        steady = top.steady["fallback_calls"] > 0
        side = top.steady if steady else top.warm
        if not side["fallback_calls"]:
            continue
        name, file, line = key
        why = expl.fallback_of(side.get("function"), file, line)
        reason = why[0] if why else "Dynamo ran this function eagerly (it did not compile it)"
        src_file, src_line = (why[1], why[2]) if why and why[1] else (file, line)
        library = None
        user = expl.user_line_into(src_file) if is_library_file(src_file) and not expl.library_frames else None
        if user is not None:  # a library's function (DDP's forward): the user's line that led there, the library's
            library, (src_file, src_line) = library_text(src_file, src_line), user  # beside it
        total = side["fallback_us"]
        per_call, per_step, share = _per_call(total, {key}, tops, steady, steps)
        hits = side["fallback_calls"]
        rows.append({
            "source": source_of(src_file, src_line), "reason": reason, "fix": fallback_fix(reason, expl.known, name),
            "calls": hits, "total_us": total, "per_call_us": per_call, "per_step_us": per_step,
            "per_hit_us": total / hits, "share": share, "kind": "eager function", "function": name,
            "file": src_file, "line": src_line, "code": expl.code_at(src_file, src_line),
            "compile_ids": why[3] if why else [],
            "warmup_calls": top.warm["fallback_calls"], "warmup_us": top.warm["fallback_us"],
            "warmup_only": not steady, "measurable": True,
            "note": f"{name} ran as plain Python",
            "detail": None, "library": library,
        })  # fmt: skip
    return rows


# ------------------------------------------------------------------------------------------------
# recompiles


def _unmapped(guard: tuple, expl: _Explained) -> bool:
    """A guard line in a library's file that the explanation could not trace back to a user line."""
    return not expl.library_frames and guard[3] is None and is_library_file(guard[0])


def _recompiled_at(rc: Recompile, expl: _Explained, guard: tuple | None = None) -> tuple:
    """(file, line, code, library) of a recompile no user line of a guard names: the recompiled function
    (a library line its guard named as the detail), or, where that function is a library's own (a compiled
    nn.Sequential, torch's wrapper of a compiled module), the first user frame that called it, with the
    function's line as the library detail."""
    file, line = rc.file, rc.line
    if rc.call_file and not expl.library_frames:
        call_file, call_line = rc.call_file, rc.call_line
        return call_file, call_line, expl.code_at(call_file, call_line), library_text(file, line)
    if guard is not None:
        return file, line, None, library_text(guard[0], guard[1])
    return file, line, None, None


def _recompiles(p: Any, tops: dict[tuple, _Top], steps: int, compile_us: dict[str, int],
                expl: _Explained) -> pl.DataFrame:  # fmt: skip
    groups: dict[tuple, dict[str, Any]] = {}
    explained: set[str] = set()
    for rc in expl.recompiles():
        cid = str(rc.compile_id)
        explained.add(_base_id(cid))
        failure = rc.failures[0] if rc.failures else None
        subject = failure.subject if failure else None
        guard = expl.guard_line(failure.compile_id, subject, failure.reason) if failure else None
        file, line, code, library = guard if guard and not _unmapped(guard, expl) else _recompiled_at(rc, expl, guard)
        key = (file, line, _readable(rc.function), subject, _reason_kind(rc.reason))
        g = groups.setdefault(key, {"ids": [], "reason": rc.reason, "code": code, "library": library})
        g["ids"].append(cid)
    for cid in compile_us:  # recompiles the explanation does not know (or no explanation)
        if _is_recompile(cid) and _base_id(cid) not in explained:
            frame = p.entry.filter(pl.col("compile_id") == cid)
            fn = frame.get_column("qualname")[0] if frame.height else None
            file = frame.get_column("file")[0] if frame.height else None
            line = frame.get_column("line")[0] if frame.height else None
            key = (file, line, _readable(fn), None, "unknown")
            g = groups.setdefault(key, {"ids": [], "reason": None, "code": None})
            g["ids"].append(cid)
    rows = []
    for (file, line, fn, subject, _), g in groups.items():
        ids = sorted(set(g["ids"]), key=_id_order)
        total = sum(compile_us.get(c, 0) for c in ids) or expl.compile_seconds(ids)
        reason = g["reason"] or ("recompiled (the explanation does not name the guard that failed)" if expl.known
                                 else "recompiled (the explanation, from dynascope run or explain, names the guard)")
        rows.append({
            "source": source_of(file, line), "reason": reason,
            "fix": recompile_fix(g["reason"], subject, explained=expl.known),
            "calls": len(ids), "total_us": total, "per_call_us": total / len(ids),
            "per_step_us": total / steps if steps else None, "function": fn, "file": file, "line": line,
            "code": g["code"], "subject": subject, "compile_ids": ids, "library": g.get("library"),
        })  # fmt: skip
    frame = pl.DataFrame(_one_row_a_line(rows), schema=_RECOMPILE_SCHEMA)
    return frame.sort(["total_us", "source"], descending=[True, False], nulls_last=True)


def _one_row_a_line(rows: list[dict]) -> list[dict]:
    """Recompiles charged to one line are one row (where torch names no guard line, two causes fall on the
    recompiled function's line): their compiles and times added, the costliest cause first, the others
    said after it."""
    by_line: dict[tuple, list[dict]] = {}
    for row in rows:
        by_line.setdefault((row["file"], row["line"]), []).append(row)
    merged = []
    for same in by_line.values():
        same.sort(key=lambda r: -(r["total_us"] or 0))
        row = dict(same[0])
        if len(same) > 1:
            ids = sorted({c for r in same for c in r["compile_ids"]}, key=_id_order)
            total = sum(r["total_us"] or 0 for r in same)
            others = "; ".join(r["reason"] for r in same[1:])
            row.update(compile_ids=ids, calls=len(ids), total_us=total, per_call_us=total / len(ids),
                       per_step_us=sum(r["per_step_us"] or 0 for r in same) if row["per_step_us"] is not None else None,
                       reason=f"{row['reason']} (also: {others})")  # fmt: skip
        merged.append(row)
    return merged


def _readable(function: str | None) -> str | None:
    """A resume function's (qualified) code name as people say it: "Net.forward (after line 33)"."""
    m = re.match(r"^(.*?)torch_dynamo_resume_in_(.+)_at_(\d+)$", function or "")
    return f"{m.group(1)}{m.group(2)} (after line {m.group(3)})" if m else function


def _is_recompile(cid: str) -> bool:
    m = re.match(r"^\[?(\d+)/(\d+)", cid or "")
    return m is not None and int(m.group(2)) > 0


def _reason_kind(reason: str | None) -> str:
    """Recompiles for one cause are grouped: a size that changes again and again is one row."""
    text = re.sub(r"expected \S+, actual \S+", "", reason or "")
    return re.sub(r"==\s*\S+", "== _", text).strip()


# ------------------------------------------------------------------------------------------------
# the explanation


class _Explained:
    """What the run's explanation says, looked up the ways the tables need (an empty one without one)."""

    def __init__(self, report: Report | None, library_frames: bool = False) -> None:
        # an explanation was read: the tables give its findings, not "run dynascope explain"
        self.known = report is not None
        self.report = report or Report()
        # charge to the library's own lines, not the first user frame (`--library-frames`)
        self.library_frames = library_frames
        self.breaks = self.report.graph_breaks
        self.times = self.report.compile_times
        self.entries: dict[str, CacheEntry] = {
            str(entry.compile_id): entry
            for explanation in self.report.explanations
            for entry in explanation.all_entries()
            if entry.compile_id
        }

    def recompiles(self) -> list[Recompile]:
        return [r for r in self.report.recompiles if r.compile_id]

    def detail_for(self, ids: set[str], file: str | None, line: int | None) -> str | None:
        for b in self.breaks:
            if set(b.compile_ids or []) & ids or (b.file == file and b.line == line):
                return b.detail
        return None

    def unseen_breaks(self, seen_ids: set[str]) -> list[dict]:
        """Breaks the explanation lists that the trace never saw run (no hit, or a frame not traced)."""
        return [self._unseen_row(b) for b in self.breaks if not (
            set(map(str, b.compile_ids or [])) & seen_ids or "fell back to eager" in str(b.reason))]  # fmt: skip

    def _unseen_row(self, b: GraphBreak) -> dict:
        file, line = b.file, b.line
        lib = _split_line(b.library)
        if lib is not None and self.library_frames:
            (file, line), lib = lib, None
        return {
            "source": source_of(file, line), "reason": b.reason or "graph break",
            "fix": break_fix(b.reason, self.code_at(file, line), b.detail, where=f"{b.file or ''} {b.library or ''}"),
            "calls": 0, "total_us": 0, "per_call_us": None, "per_step_us": None, "per_hit_us": None, "share": None,
            "kind": "graph break", "function": b.function, "file": file, "line": line,
            "code": self.code_at(file, line), "compile_ids": [str(c) for c in b.compile_ids or []], "warmup_calls": 0,
            "warmup_us": 0, "warmup_only": False, "measurable": False, "note": "not seen running in the trace",
            "detail": b.detail, "library": library_text(*lib) if lib else None,
        }  # fmt: skip

    def user_line_into(self, file: str | None) -> tuple[str, int] | None:
        """(file, line) of the user's line that a graph break inside library file `file` is charged to (the
        break's `library` names that file), or None: where a library's function ran eagerly, the line of the
        program that led into it."""
        for b in self.breaks:
            lib = _split_line(b.library)
            if file and lib is not None and lib[0] == file and b.file and b.line:
                return (str(b.file), int(b.line))
        return None

    def fallback_of(self, function: str | None, file: str | None, line: int | None) -> tuple | None:
        """(reason, file, line, compile ids) of why Dynamo ran this function eagerly, or None. Its compiles
        that gave up: status failed or skipped, or (torch 2.8, which calls them ok) no graph; the reason is
        the break logged in them, else what the compile record says."""
        mine = [t for t in self.times if t.file == file and t.line == line
                and (function is None or t.function == function)]  # fmt: skip
        gave_up = [t for t in mine if t.status != "ok"] or [t for t in mine if t.graph_op_count is None]
        failed = [str(t.compile_id) for t in gave_up]
        for b in self.breaks:
            if set(b.compile_ids or []) & set(failed):
                reason = str(b.reason or "graph break")
                if "fell back" not in reason:
                    reason += " (the whole function ran eagerly)"
                return (reason, b.file, b.line, failed)
        if gave_up:  # torch (2.5) logged no break for it: say what the compile record does
            t = gave_up[0]
            why = t.fail_reason or t.fail_type
            return (f"Dynamo gave up on this function (compile {t.compile_id} {t.status}"
                    + (f": {why})" if why else ")"), None, None, failed)
        for fb in self.report.eager_fallbacks:
            if fb.file == file and fb.line == line:
                return (fb.reason, None, None, [str(fb.compile_id)])
        return None

    def guard_line(self, compile_id: str | None, subject: str | None, reason: str | None = None) -> tuple | None:
        """(file, line, code, library) of the user line that installed the guard on `subject` in cache entry
        `compile_id` (torch 2.9+ records it), or None. Where torch named a library's line, the explanation
        gives the first user frame that led there: that line, and the library's as `library`
        ("torch/nn/modules/conv.py:560"); the library's line itself where library frames were asked for.
        A tensor's mismatch (`reason` "tensor 'x' size mismatch ...") is its tensor guard's line."""
        entry = self.entries.get(str(compile_id))
        if entry is None or not subject:
            return None
        for group in entry.guards:
            if group.subject != subject:
                continue
            guards = list(group.guards)
            if (reason or "").startswith("tensor '"):
                guards.sort(key=lambda g: g.kind != "TENSOR_MATCH")
            for guard in guards:
                ul = guard.user_line
                if ul is not None and ul.line:
                    lib = ul.library_file
                    if lib and self.library_frames:
                        return (lib, ul.library_line, ul.library_code, None)
                    return (ul.file, ul.line, ul.code, library_text(lib, ul.library_line) if lib else None)
        return None

    def compile_seconds(self, ids: list[str]) -> int:
        wanted = set(ids)
        return int(sum((t.total_s or 0) * 1e6 for t in self.times if str(t.compile_id) in wanted))

    @staticmethod
    def code_at(file: str | None, line: int | None) -> str | None:
        import linecache

        if not file or not line:
            return None
        return linecache.getline(file, line).strip() or None
