"""Summaries of traces: the entry points.

`summarize(frame)` = `finish(partial(frame))`. Many files (or Dask partitions) give
`finish(merge([file_partial(f) for f in files]))`, which is identical (see `partial` for why).

Conventions:

- op events: `cat == "dynamo"`; graph calls: `"dynamo.graph"`; compile phases: `"dynamo.compile"`;
  user regions: any other cat except `dftracer`/`dynascope`.
- percentiles are nearest-rank: p50 is the smallest duration d such that at least 50% of the op's
  events last <= d.
- an op belongs to the innermost user region that has an `epoch` or `step` arg on the same
  (trace_file, pid, tid) and whose [ts, ts+dur] interval contains the op's start (`steps`).
- a thread without such regions has automatic steps when it has `optimizer.step` events, and every
  step's wall time is split into parts (data, forward, backward, optimizer, io, compile, other) that add
  up to it exactly (`stepparts`; docs/trace-format.md, "Steps"); `stepstats` gives their median, p95
  and share over the steps and names the slowest steps with why.
- compile time per process is the union of its compile-phase intervals on every thread (nested or
  overlapping phases are not counted twice), each instant charged to one compile id (compile workers'
  events without an id to the compile they serve: partial_build.charge_compile_time), so the per-id rows add
  up to it. Run time per process is the sum of its graph calls, or of its op events when it has no
  graph events.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Mapping, Sequence

import polars as pl

from dynascope.analyze.fastpath import file_partial
from dynascope.analyze.finish import finish
from dynascope.analyze.partial import SUMMARY_COLUMNS, Partial, merge
from dynascope.analyze.partial_build import partial
from dynascope.analyze.read.paths import expand_paths, map_files
from dynascope.analyze.read.readinfo import ReadInfo, TraceWarning
from dynascope.analyze.summary import Summary
from dynascope.artifacts.explanation import Report
from dynascope.artifacts.run_dir import EXPLANATION_FILE, find_beside, load_explanation

__all__ = [
    "SUMMARY_COLUMNS", "Partial", "file_partial", "finish", "merge", "partial",
    "rank_explanations", "read_explanation", "summarize", "summarize_files",
]  # fmt: skip

# An explanation as the entry points take it: the typed Report, explanation.json's dict, or its path.
ExplanationLike = Report | dict | str | os.PathLike


def summarize(frame: pl.DataFrame, top: int = 20, info: ReadInfo | None = None,
              explanation: ExplanationLike | None = None, library_frames: bool = False) -> Summary:  # fmt: skip
    """Summarise a frame from `read_trace` (see the module docstring for the conventions); `info` (from
    `read_trace_with_info`) carries the files' dropped lines and warnings into `meta`; `explanation` (the
    run's explanation: a Report, explanation.json's path or its dict) adds why to the graph-break and
    recompile tables; `library_frames` charges them to the library's own lines."""
    return finish(partial(frame, info), top=top, explanation=read_explanation(explanation),
                  library_frames=library_frames)  # fmt: skip


def summarize_files(
    paths,
    top: int = 20,
    scheduler: str | None = None,
    workers: int | None = None,
    threads: int | None = None,
    explanation: ExplanationLike | None = None,
    explanations: Mapping[int, ExplanationLike] | None = None,
    explanation_beside: bool = False,
    library_frames: bool = False,
) -> Summary:
    """Summarise trace files without holding them all in memory: one partial per file, merged.

    With `scheduler` (a Dask scheduler address) or `workers` (a local Dask cluster of N workers) the
    files are read and pre-aggregated on Dask; the result is identical to the single-machine one.
    `explanation`: the run's explanation (a Report, explanation.json's path or its dict) for why each
    graph break, eager function and recompile happened; "auto" takes the one beside the traces, if any (and
    so does `explanation_beside`: the one given was found beside the traces). Ranks' traces: every rank's
    explanation is read (`explanations`, rank -> Report, dict or path, else `rank_explanations` finds them)
    for the per-rank and divergence tables (docs/ranks.md); with `explanation` not given, the job's
    graph-break and recompile tables come from all of them. `library_frames`: those tables charge to the
    library's own lines, not the first user frame that led there.
    """
    auto = explanation == "auto"
    if auto:
        explanation = find_beside(paths, EXPLANATION_FILE)
    explained = read_explanation(explanation)
    if scheduler is not None or workers is not None:
        from dynascope.analyze.dask import summarize_files_dask

        return summarize_files_dask(paths, top=top, scheduler=scheduler, workers=workers, explanation=explained,
                                    library_frames=library_frames)  # fmt: skip
    files = expand_paths(paths)
    parts = map_files(file_partial, files, threads=threads)
    ranked, ranked_files = rank_explanations(paths, files, parts, explanations)
    if (auto or explanation_beside) and len(ranked) > 1:
        explained = None  # the job's tables come from every rank's explanation, not one found beside a trace
    result = finish(merge(parts), top=top, explanation=explained, explanations=ranked,
                    library_frames=library_frames, explanation_files=ranked_files)  # fmt: skip
    _emit_warnings(result.meta["warnings"])
    return result


def rank_explanations(
    paths, files: Sequence[str | os.PathLike], parts: list[Partial], given: Mapping[int, ExplanationLike] | None = None
) -> tuple[dict[int, Report], dict[int, str]]:
    """Every rank's explanation, read: `DIR/rank<R>/explanation.json` (a job's layout) or the one beside a
    rank's own trace (one directory per rank); `given` (rank -> Report, dict or path) first. Empty for a
    trace without ranks. Also: rank -> the file each was read from."""
    from dynascope.analyze.ranks import rank_explanation_paths

    file_ranks: dict[str, int] = {}
    for f, p in zip(files, parts, strict=True):
        r = p.proc_file.get_column("rank").drop_nulls()
        if r.len():
            file_ranks[os.fspath(f)] = int(r.min())  # type: ignore[arg-type]
    out: dict[int, Report] = {}
    read_from: dict[int, str] = {}
    for rank, e in (given or {}).items():
        read = read_explanation(e)
        if read is not None:
            out[int(rank)] = read
            if isinstance(e, (str, os.PathLike)):
                read_from[int(rank)] = os.fspath(e)
    if file_ranks:
        for rank, path in rank_explanation_paths(paths if isinstance(paths, (list, tuple)) else [paths],
                                                 file_ranks).items():  # fmt: skip
            if rank not in out:
                read = read_explanation(path)
                if read is not None:
                    out[rank], read_from[rank] = read, path
    return dict(sorted(out.items())), read_from


def read_explanation(explanation: ExplanationLike | None) -> Report | None:
    """The explanation as the typed Report (a Report is taken as it is, a dict read as explanation.json's
    object); a file that cannot be read is a warning, and the tables then give what the trace alone says."""
    if explanation is None or isinstance(explanation, Report):
        return explanation
    data = explanation if isinstance(explanation, dict) else load_explanation(explanation)
    if data.get("_unreadable"):
        warnings.warn(f"{data['notes'][0]}; the graph-break and recompile tables give what the trace alone says",
                      TraceWarning, stacklevel=3)  # fmt: skip
        return None
    return Report.from_dict(data)


def _emit_warnings(msgs: Iterable[str]) -> None:
    for m in msgs:
        warnings.warn(m, TraceWarning, stacklevel=3)
