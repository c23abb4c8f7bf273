"""Did compiling pay off? Compiled calls against eager calls of the same function, and the compile time.

Both sides are summarised by the middle of their calls (p25, median, p75: a first call that compiled, or
a garbage collection, does not move them). The speedup is eager median / compiled median; the saving per
call is their difference; compiling is repaid after compile time / saving calls. The comparison is
*noisy* when either side has fewer than MIN_CALLS calls, or when the middle halves of the two sets of calls
overlap (the difference is within the calls' own spread): then the verdict says so instead of a number
that the next run might reverse.

`vs_eager(compiled, eager)` joins two Summaries' `compiled_functions` tables (a run and its eager
comparison run, `dynascope run --compare-eager`) and their steps; `judge` is the rule for one pair.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import polars as pl

from dynascope.analyze import memory
from dynascope.analyze.stepstats import step_rows
from dynascope.analyze.summary import Summary

__all__ = ["MIN_CALLS", "VS_EAGER_SCHEMA", "Sample", "judge", "sample", "vs_eager", "with_eager"]

MIN_CALLS = 5

VS_EAGER_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "what": pl.String, "compiled_calls": pl.Int64, "eager_calls": pl.Int64, "compiled_us": pl.Float64,
    "eager_us": pl.Float64, "speedup": pl.Float64, "saving_us": pl.Float64, "compile_us": pl.Int64,
    "breakeven_calls": pl.Int64, "noisy": pl.Boolean, "verdict": pl.String,
}  # fmt: skip


@dataclass(frozen=True)
class Sample:
    """The middle of a set of call (or step) times, in µs."""

    calls: int
    p25: float
    median: float
    p75: float


def sample(times: list[float]) -> Sample | None:
    """The nearest-rank p25, median and p75 of `times` (None for none)."""
    if not times:
        return None
    ordered = sorted(times)

    def rank(pct: int) -> float:
        return ordered[max(0, math.ceil(len(ordered) * pct / 100) - 1)]

    return Sample(len(ordered), rank(25), rank(50), rank(75))


def judge(compiled: Sample, eager: Sample, compile_us: float | None, unit: str = "call") -> dict:
    """speedup, saving_us, breakeven_calls, noisy and a one-line verdict for one function (or the steps)."""
    speedup = eager.median / compiled.median if compiled.median > 0 else None
    saving = eager.median - compiled.median
    few = min(compiled.calls, eager.calls) < MIN_CALLS
    overlap = compiled.p25 <= eager.p75 and eager.p25 <= compiled.p75
    noisy = few or overlap
    breakeven = None
    if saving > 0 and compile_us:
        breakeven = math.ceil(compile_us / saving)
    plural = f"{unit}s"
    if few:
        verdict = (f"too few {plural} to compare ({min(compiled.calls, eager.calls)}; {MIN_CALLS} or more give "
                   "a verdict)")  # fmt: skip
    elif overlap:
        verdict = (f"no clear difference: the middle halves of the compiled and eager {plural} overlap "
                   f"({_us(compiled.p25)}–{_us(compiled.p75)} against {_us(eager.p25)}–{_us(eager.p75)})")
    elif saving > 0:
        repaid = f"; compiling ({_us(compile_us or 0)}) is repaid after {breakeven:,} {plural}" if breakeven else ""
        verdict = f"compiled is {speedup:.2f}x faster ({_us(saving)} saved a {unit}){repaid}"
    else:
        verdict = (f"compiled is slower ({_us(-saving)} more a {unit}, {1 / speedup if speedup else 0:.2f}x "
                   "eager's time): compiling never pays off")
    return {"speedup": speedup, "saving_us": saving, "breakeven_calls": breakeven, "noisy": noisy,
            "verdict": verdict}  # fmt: skip


def _us(v: float) -> str:
    v = float(v)
    if abs(v) >= 1e6:
        return f"{v / 1e6:.3g} s"
    if abs(v) >= 1e3:
        return f"{v / 1e3:.3g} ms"
    return f"{v:.0f} µs"


def vs_eager(compiled_functions: pl.DataFrame, eager_functions: pl.DataFrame, compiled_steps: pl.DataFrame,
             eager_steps: pl.DataFrame) -> pl.DataFrame:  # fmt: skip
    """One row per compiled function found in both runs, and one for the steps where both have them."""
    eager = {(r["function"], r["file"], r["line"]): r for r in eager_functions.iter_rows(named=True)}
    rows = []
    for r in compiled_functions.iter_rows(named=True):
        e = eager.get((r["function"], r["file"], r["line"]))
        mine, theirs = _of_row(r), _of_row(e) if e else None
        if mine is None or theirs is None:
            continue
        rows.append(_row(f"calls of {r['function']}", mine, theirs, r.get("compile_us"), "call"))
    steps = _step_sample(compiled_steps, steady=True), _step_sample(eager_steps, steady=False)
    if steps[0] is not None and steps[1] is not None:
        compile_us = None
        if "compile_us" in compiled_steps.columns:
            compile_us = int(compiled_steps.get_column("compile_us").sum() or 0)
        rows.append(_row("steps", steps[0], steps[1], compile_us, "step"))
    return pl.DataFrame(rows, schema=VS_EAGER_SCHEMA)


def _row(what: str, mine: Sample, theirs: Sample, compile_us: int | None, unit: str) -> dict:
    j = judge(mine, theirs, compile_us, unit)
    return {"what": what, "compiled_calls": mine.calls, "eager_calls": theirs.calls, "compiled_us": mine.median,
            "eager_us": theirs.median, "speedup": j["speedup"], "saving_us": j["saving_us"], "compile_us": compile_us,
            "breakeven_calls": j["breakeven_calls"], "noisy": j["noisy"], "verdict": j["verdict"]}  # fmt: skip


def _of_row(r: dict | None) -> Sample | None:
    if not r or r.get("median_us") is None:
        return None
    return Sample(int(r.get("steady_calls") or 0), float(r["p25_us"]), float(r["median_us"]), float(r["p75_us"]))


def _step_sample(by_step: pl.DataFrame, steady: bool) -> Sample | None:
    """The steps' wall times; of the compiled run, only the steps that compiled nothing (steady)."""
    steps = step_rows(by_step) if by_step.height else by_step
    if steps.height == 0 or "total_us" not in steps.columns:
        return None
    if steady and "compiles" in steps.columns:
        steps = steps.filter(pl.col("compiles").fill_null(0) == 0)
    return sample([float(v) for v in steps.get_column("total_us").drop_nulls().to_list()])


def with_eager(summary: Summary, eager: Summary) -> Summary:
    """`summary` (a run) with the comparison against `eager` (the same program run eagerly): its
    `vs_eager` table, and the eager call time, speedup and calls-to-repay in `compiled_functions`."""
    table = vs_eager(summary.compiled_functions, eager.compiled_functions, summary.by_step, eager.by_step)
    by_function = {r["what"].removeprefix("calls of "): r for r in table.iter_rows(named=True)
                   if r["what"].startswith("calls of ")}  # fmt: skip
    functions = summary.compiled_functions
    names = functions.get_column("function").to_list() if functions.height else []

    def column(key: str, dtype: type[pl.DataType]) -> pl.Series:
        return pl.Series(key, [by_function.get(n, {}).get(key) for n in names], dtype=dtype)

    functions = functions.with_columns(
        column("eager_us", pl.Float64).alias("eager_per_call_us"), column("speedup", pl.Float64),
        column("breakeven_calls", pl.Int64), column("noisy", pl.Boolean), column("verdict", pl.String),
    )  # fmt: skip
    return dataclasses.replace(summary, vs_eager=table, compiled_functions=functions,
                               memory_by_layer=memory.with_eager_saved(summary.memory_by_layer, eager.memory_by_layer),
                               memory_by_step=memory.with_eager_peaks(summary.memory_by_step, eager.memory_by_step))
