"""The render side's one door into analysis: paths in, a Summary out.

Also exports a Summary as JSON-ready dicts and CSV files.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import polars as pl

from dynascope.analyze.pipeline import summarize_files
from dynascope.analyze.summary import Summary
from dynascope.artifacts.explanation import Report
from dynascope.errors import ConfigError
from dynascope.render.table_specs import TABLES

__all__ = ["SUMMARY_TABLES", "summarize_paths", "summary_to_dict", "write_csv"]

# the per-step breakdown first (by_step, step_stats, slow_steps), then the other tables in TABLES order
_FIRST = ("by_step", "step_stats", "slow_steps")
_RANKS = ("divergence", "by_rank", "by_rank_step")  # many ranks (analyze/ranks.py): empty frames otherwise
_COMM = ("hangs", "stragglers", "collectives", "clocks")  # collectives (analyze/comm.py): empty frames otherwise
SUMMARY_TABLES = (_FIRST + tuple(spec.attr for spec in TABLES if spec.attr not in _FIRST + _RANKS + _COMM) + _RANKS
                  + _COMM)  # fmt: skip


def summarize_paths(
    paths: list[str | Path], top: int = 20, scheduler: str | None = None, workers: int | None = None,
    explanation: Report | None = None, explanation_beside: bool = False, library_frames: bool = False,
) -> Summary:
    """Read and summarise trace files; on a Dask cluster when `scheduler` or `workers` is given.
    `explanation` (the run's, read) says why for the graph-break and recompile tables;
    `explanation_beside`: it was found beside the traces, so a job's traces take every rank's instead
    (summary.explanations; docs/ranks.md); `library_frames`: those tables charge library lines."""
    if top < 1:
        raise ConfigError(f"--top must be at least 1 (got {top})")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the reader's warnings come back in summary.meta and are shown once
        # one partial per file, merged (on Dask with scheduler/workers): the same summary as
        # summarize(read_trace(...)) at a fraction of the memory
        return summarize_files([str(p) for p in paths], top=top, scheduler=scheduler, workers=workers,
                               explanation=explanation, explanation_beside=explanation_beside,
                               library_frames=library_frames)  # fmt: skip


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def summary_to_dict(summary: Summary) -> dict:
    """{"meta": ..., "top": N, "by_step": [rows], "step_stats": [rows], "slow_steps": [rows], "by_op": [rows],
    ..., "kernel_sources": {hash: code}}: what `dynascope report --json` prints (the per-step breakdown
    first: by_step with its part columns, the statistics over the steps, the slowest steps and why)."""
    out: dict[str, Any] = {"top": summary.top, "meta": dict(summary.meta)}
    for attr in SUMMARY_TABLES:
        if attr in _RANKS and summary.table(attr).height == 0:
            continue  # a trace without ranks: as before
        out[attr] = [{k: _jsonable(v) for k, v in row.items()} for row in summary.table(attr).to_dicts()]
    out["kernel_sources"] = summary.sources  # by_kernel's `kernel_code` -> the code it runs
    if summary.explanations:  # rank -> its file
        out["explanations"] = {str(r): summary.explanation_files.get(r) for r in summary.explanations}
    return out


def _csv_safe(frame: pl.DataFrame) -> pl.DataFrame:
    """Nested columns become text, which CSV can hold: a list of strings (by_step's compile ids and saved
    files) joined with "; ", anything else nested as JSON-ish text."""
    casts = []
    for name, dtype in frame.schema.items():
        if isinstance(dtype, pl.List) and dtype.inner == pl.String:
            casts.append(pl.col(name).list.join("; ").alias(name))
        elif isinstance(dtype, pl.List) and dtype.inner.is_numeric():  # a collective's ranks and times
            casts.append(pl.col(name).list.eval(pl.element().cast(pl.String)).list.join("; ").alias(name))
        elif isinstance(dtype, (pl.List, pl.Struct, pl.Array, pl.Object)):
            casts.append(pl.col(name).map_elements(str, return_dtype=pl.String).alias(name))
    return frame.with_columns(casts) if casts else frame


def write_csv(summary: Summary, target: str | Path) -> list[Path]:
    """A directory → one CSV per table (by_op.csv, by_layer.csv, ...); a `.csv` file → the per-op table."""
    target = Path(target)
    if target.suffix.lower() == ".csv" and not target.is_dir():
        frame = summary.by_op
        target.parent.mkdir(parents=True, exist_ok=True)
        _csv_safe(frame).write_csv(target)
        return [target]
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"--csv {target}: cannot create this directory ({exc.strerror}); give a writable directory or a .csv file"
        ) from None
    written = []
    for attr in SUMMARY_TABLES:
        frame = summary.table(attr)
        if frame.width and not (attr in _RANKS and frame.height == 0):
            path = target / f"{attr}.csv"
            _csv_safe(frame).write_csv(path)
            written.append(path)
    return written
