"""Statistics over the steps of by_step: per part median, p95, mean and share; the slowest steps, each with
what was different about it, in words taken from the numbers.

Steps are the by_step rows with a step number (rows of epoch-only regions are left out), or every row when
none has one. Percentiles are nearest-rank, as everywhere in the summaries. A slow step is one of the
slowest (by wall time) that took longer than the median step; what was different is the part with the
largest excess over its own median, when that excess is at least a tenth of the median step (else no part
stands out, and the text says so), with what the step's rows say about it: the compile ids begun in it, the
files saved in it.
"""

from __future__ import annotations

import math
import os

import polars as pl

from dynascope.analyze.stepparts import PART_COLUMNS, PARTS

__all__ = ["PART_LABELS", "SLOW_STEPS", "slow_steps", "step_rows", "step_stats"]

SLOW_STEPS = 3  # how many slow steps are named
STANDS_OUT = 0.1  # a part's excess over its median, as a share of the median step, that names it
ALSO = 2  # how many other parts that stand out too are named after the first
PART_LABELS = {
    "data": "data wait",
    "forward": "forward",
    "eval": "eval",
    "backward": "backward",
    "optimizer": "optimizer",
    "io": "I/O",
    "compile": "compile",
    "comm": "exposed communication",
    "other": "other Python",
}
_OPTIONAL_PARTS = ("comm",)  # a row in step_stats only where some step has it (a run with collectives)

_STATS_SCHEMA = {
    "part": pl.String, "median_us": pl.Int64, "p95_us": pl.Int64, "mean_us": pl.Float64, "total_us": pl.Int64,
    "share": pl.Float64, "max_us": pl.Int64,
}  # fmt: skip
_SLOW_SCHEMA = {
    "epoch": pl.Int64, "step": pl.Int64, "total_us": pl.Int64, "over_us": pl.Int64, "part": pl.String,
    "excess_us": pl.Int64, "why": pl.String,
}  # fmt: skip


def step_rows(by_step: pl.DataFrame) -> pl.DataFrame:
    """The rows that are steps: those with a step number, or all when none has one."""
    if "step" in by_step.columns and by_step.get_column("step").null_count() < by_step.height:
        return by_step.filter(pl.col("step").is_not_null())
    return by_step


def _nearest_rank(values: list[int], pct: int) -> int:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(len(ordered) * pct / 100) - 1)]


def step_stats(by_step: pl.DataFrame) -> pl.DataFrame:
    """One row for the step's wall time ("total") and one per part: median_us, p95_us (nearest rank),
    mean_us, total_us, share (of all steps' wall time), max_us. Empty without steps."""
    steps = step_rows(by_step)
    if steps.height == 0 or not set(PART_COLUMNS) <= set(steps.columns):
        return pl.DataFrame(schema=_STATS_SCHEMA)
    wall = int(steps.get_column("total_us").sum() or 0)
    rows = []
    for part, col in (("total", "total_us"), *zip(PARTS, PART_COLUMNS, strict=True)):
        values = [int(v or 0) for v in steps.get_column(col).to_list()]
        total = sum(values)
        if part in _OPTIONAL_PARTS and not total:
            continue
        rows.append(
            {
                "part": part,
                "median_us": _nearest_rank(values, 50),
                "p95_us": _nearest_rank(values, 95),
                "mean_us": total / len(values),
                "total_us": total,
                "share": total / wall if wall else 0.0,
                "max_us": max(values),
            }
        )
    return pl.DataFrame(rows, schema=_STATS_SCHEMA)


def slow_steps(by_step: pl.DataFrame, stats: pl.DataFrame, by_rank_step: pl.DataFrame | None = None,
               limit: int = SLOW_STEPS) -> pl.DataFrame:  # fmt: skip
    """Up to `limit` of the slowest steps that took longer than the median step, slowest first: epoch,
    step, total_us, over_us (over the median step), part (the one that stands out, or null), excess_us (its
    excess over its median), why (plain words). With ranks (`by_rank_step`): + rank, the rank whose step
    stood out, each rank's parts measured against its own medians; the why names it, and says where the
    other ranks spent the time waiting for it (docs/ranks.md)."""
    if by_rank_step is not None and by_rank_step.height and "rank" in by_step.columns:
        return _slow_job_steps(by_step, stats, by_rank_step, limit)
    steps = step_rows(by_step)
    if steps.height < 2 or stats.height == 0:
        return pl.DataFrame(schema=_SLOW_SCHEMA)
    median = {r["part"]: r["median_us"] for r in stats.iter_rows(named=True)}
    typical = median["total"]
    slow = (
        steps.filter(pl.col("total_us") > typical)
        .sort(["total_us", "epoch", "step"], descending=[True, False, False], nulls_last=True)
        .head(limit)
    )
    rows = []
    for r in slow.iter_rows(named=True):
        excess = {p: int(r[c] or 0) - median.get(p, 0) for p, c in zip(PARTS, PART_COLUMNS, strict=True)}
        part = max(PARTS, key=lambda p: excess[p])  # ties: the first in PARTS
        over = int(r["total_us"]) - typical
        stands_out = excess[part] > 0 and excess[part] >= STANDS_OUT * typical
        rows.append(
            {
                "epoch": r["epoch"],
                "step": r["step"],
                "total_us": r["total_us"],
                "over_us": over,
                "part": part if stands_out else None,
                "excess_us": excess[part] if stands_out else None,
                "why": _why(part, excess, r, typical) if stands_out else _no_part(over),
            }
        )
    return pl.DataFrame(rows, schema=_SLOW_SCHEMA)


# parts a rank spends waiting for a slower rank: the collective's wait is in its backward (DDP's all-reduce
# in the autograd hooks), in exposed communication where the trace has collectives, or between traced events
WAITING = ("backward", "comm", "other")
_SLOW_RANK_SCHEMA = {**_SLOW_SCHEMA, "rank": pl.Int64}


def _rank_medians(by_rank_step: pl.DataFrame, parts: list[str]) -> dict[int, dict[str, int]]:
    out: dict[int, dict[str, int]] = {}
    for (rank,), g in by_rank_step.partition_by("rank", as_dict=True).items():
        steps = step_rows(g)
        out[rank] = {p: _nearest_rank([int(v or 0) for v in steps.get_column(c).to_list()], 50)
                     for p, c in [("total", "total_us"), *((p, f"{p}_us") for p in parts)] if c in steps.columns}
    return out


def _slow_job_steps(by_step: pl.DataFrame, stats: pl.DataFrame, by_rank_step: pl.DataFrame,
                    limit: int) -> pl.DataFrame:  # fmt: skip
    """The slowest job steps: for each, every rank's excess per part over that rank's median; the rank with
    the largest excess in a part that is no waiting (a compile, a data stall, I/O) is the cause, else the
    slowest rank; the others' excess in waiting parts is said as waiting for it."""
    steps = step_rows(by_step)
    if steps.height < 2 or stats.height == 0:
        return pl.DataFrame(schema=_SLOW_RANK_SCHEMA)
    parts = [p for p in dict.fromkeys((*PARTS, "comm")) if f"{p}_us" in by_rank_step.columns]
    typical = {r["part"]: r["median_us"] for r in stats.iter_rows(named=True)}["total"]
    medians = _rank_medians(by_rank_step, parts)
    slow = (
        steps.filter(pl.col("total_us") > typical)
        .sort(["total_us", "epoch", "step"], descending=[True, False, False], nulls_last=True)
        .head(limit)
    )
    rows = []
    for r in slow.iter_rows(named=True):
        same = by_rank_step.filter(pl.col("step").eq_missing(r["step"]) & pl.col("epoch").eq_missing(r["epoch"]))
        excess: dict[int, dict[str, int]] = {}
        for rr in same.iter_rows(named=True):
            m = medians.get(rr["rank"], {})
            excess[rr["rank"]] = {p: int(rr[f"{p}_us"] or 0) - m.get(p, 0) for p in parts}
        bar = STANDS_OUT * typical
        causes = [(e[p], -rank, p, rank) for rank, e in excess.items() for p in parts
                  if p not in WAITING and e[p] > 0 and e[p] >= bar]  # fmt: skip
        over = int(r["total_us"]) - typical
        part: str | None = None
        if causes:
            _, _, part, rank = max(causes)
        else:
            rank = r["rank"]
            e = excess.get(rank, {})
            top = max(parts, key=lambda p: e.get(p, 0)) if e else None
            if top is not None and e[top] > 0 and e[top] >= bar:
                part = top
        row_of = {rr["rank"]: rr for rr in same.iter_rows(named=True)}
        if part is None:
            why = f"rank {rank}: " + _no_part(over)
        else:
            own = {p: excess[rank][p] for p in parts}
            why = f"rank {rank}: " + _why(part, own, row_of.get(rank, r), typical)
            waited, too = [], []
            for other, e in sorted(excess.items()):
                if other == rank:
                    continue
                w = max(WAITING, key=lambda p: e.get(p, 0))
                if e.get(part, 0) >= bar:
                    too.append(f"rank {other} {PART_LABELS.get(part, part)} +{_ms(e[part])}")
                elif part not in WAITING and e.get(w, 0) >= bar:
                    waited.append(f"rank {other} {PART_LABELS.get(w, w)} +{_ms(e[w])}")
            if too:
                why += "; the same on " + ", ".join(too[:ALSO + 1]) + (
                    f" and {len(too) - ALSO - 1} more" if len(too) > ALSO + 1 else "")
            if waited:
                shown = ", ".join(waited[:ALSO + 1]) + (f" and {len(waited) - ALSO - 1} more" if len(waited) > ALSO + 1
                                                        else "")  # fmt: skip
                why += f"; the other ranks waited for it ({shown}: in their collectives)"
        rows.append({
            "epoch": r["epoch"], "step": r["step"], "total_us": r["total_us"], "over_us": over,
            "part": part, "excess_us": excess[rank][part] if part is not None and rank in excess else None,
            "why": why, "rank": rank,
        })  # fmt: skip
    return pl.DataFrame(rows, schema=_SLOW_RANK_SCHEMA)


def _why(part: str, excess: dict[str, int], row: dict, typical: int) -> str:
    text = f"{PART_LABELS.get(part, part)} +{_ms(excess[part])}"
    detail = _detail(part, row)
    if detail:
        text += f" ({detail})"
    also = [
        f"{PART_LABELS.get(p, p)} +{_ms(excess[p])}"
        for p in sorted(excess, key=lambda p: -excess[p])
        if p != part and excess[p] > 0 and excess[p] >= STANDS_OUT * typical
    ][:ALSO]
    if also:
        text += "; also " + ", ".join(also)
    return text


def _detail(part: str, row: dict) -> str:
    if part == "compile":
        ids = list(row.get("compile_ids") or [])
        if not ids:
            return "no compile began in this step"
        again = [i for i in ids if _attempt(i) > 0]
        n = len(ids)
        started = f"{n} compile{'s' if n != 1 else ''} started: {_names(ids)}"
        return f"recompile: {started}" if again else started
    if part == "data":
        return "data stall"
    if part == "eval":
        return "evaluation: compiled calls with grad disabled"
    if part == "io":
        saved = list(row.get("saved") or [])
        return f"saved {_names([os.path.basename(s) or s for s in saved])}" if saved else ""
    if part == "other":
        return "time between traced events"
    if part == "comm":
        return "waiting for collectives while computing nothing"
    return ""


def _no_part(over: int) -> str:
    return f"no part stands out (+{_ms(over)} over the median step, spread over the parts)"


def _attempt(compile_id: str) -> int:
    """The attempt of a compile id "frame/attempt" ("0/1": the first recompile of frame 0); 0 if none."""
    tail = str(compile_id).rsplit("/", 1)[-1] if "/" in str(compile_id) else "0"
    digits = "".join(ch for ch in tail if ch.isdigit())
    return int(digits) if digits else 0


def _names(items: list[str], shown: int = 3) -> str:
    head = ", ".join(items[:shown])
    return head + (f" and {len(items) - shown} more" if len(items) > shown else "")


def _ms(us: float) -> str:
    """A duration for the why text: µs below 1 ms, else ms (3 significant digits) or s."""
    if us < 1000:
        return f"{us:.0f} µs"
    if us < 1_000_000:
        ms = us / 1000
        return f"{ms:.3g} ms" if ms < 100 else f"{ms:.0f} ms"
    return f"{us / 1e6:.3g} s"
