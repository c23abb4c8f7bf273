"""Finish a merged Partial into the Summary tables (deterministic row order)."""

from __future__ import annotations

import polars as pl

from dynascope.analyze import comm_job, gpu, memory, ranks
from dynascope.analyze.costs import cost_tables
from dynascope.analyze.files import finish_files
from dynascope.analyze.partial import KERNEL_KEYS, Partial
from dynascope.analyze.stepparts import COMM_NUMBER_COLUMNS, LIST_COLUMNS, PART_COLUMNS
from dynascope.analyze.stepstats import slow_steps, step_rows, step_stats
from dynascope.analyze.summary import Summary, summary_meta
from dynascope.artifacts.explanation import Report

__all__ = ["finish"]


def _share(col: str = "total_us") -> pl.Expr:
    total = pl.col(col).sum()
    return pl.when(total > 0).then(pl.col(col) / total).otherwise(0.0).alias("share")


def finish(p: Partial, top: int = 20, explanation: Report | None = None,
           explanations: dict[int, Report] | None = None, library_frames: bool = False,
           explanation_files: dict[int, str] | None = None) -> Summary:  # fmt: skip
    """Turn merged partials into the Summary tables (deterministic row order). `explanation`: the
    explanation of the same run, for the graph-break and recompile tables; `explanations`: each rank's
    (rank -> Report), for the per-rank and divergence tables (docs/ranks.md) and, merged, those tables where
    `explanation` is not given; `explanation_files`: where each rank's was read from; `library_frames`: costs
    charged to the library's own lines (`--library-frames`)."""
    explanations = dict(explanations or {})
    if explanation is None and explanations:
        explanation = ranks.merged_explanation(explanations)
    by_op = _by_op(p.op_hist)
    by_kernel = _by_kernel(p.kernel)
    lay = p.layer
    by_layer = (
        lay.group_by(["layer", "module_type"])
        .agg(
            pl.col("count").sum(),
            pl.col("total_us").sum(),
            pl.col("total_us").filter(pl.col("phase") == "forward").sum().alias("forward_us"),
            pl.col("total_us").filter(pl.col("phase") == "backward").sum().alias("backward_us"),
            pl.col("total_us").filter(pl.col("phase") == "inference").sum().alias("inference_us"),
        )
        .with_columns(_share())
        .sort(["total_us", "layer", "module_type"], descending=[True, False, False], nulls_last=True)
        .select("layer", "module_type", "count", "total_us", "forward_us", "backward_us", "share", "inference_us")
    )
    by_phase = (
        lay.group_by("phase")
        .agg(pl.col("count").sum(), pl.col("total_us").sum())
        .with_columns(_share())
        .sort(["total_us", "phase"], descending=[True, False], nulls_last=True)
    )
    by_graph = (
        p.graph.filter((pl.col("calls") > 0) | pl.col("graph").is_not_null())
        .with_columns(
            pl.when(pl.col("calls") > 0).then(pl.col("ops") / pl.col("calls")).otherwise(None).alias("ops_per_call"),
            pl.when(pl.col("calls") > 0)
            .then(pl.col("total_us") / pl.col("calls"))
            .otherwise(None)
            .alias("mean_call_us"),
        )
        .sort(["total_us", "compile_id", "graph", "phase"], descending=[True, False, False, False], nulls_last=True)
        .select("compile_id", "graph", "phase", "calls", "ops_per_call", "total_us", "mean_call_us", "ops")
    )
    step_columns: list[str | pl.Expr] = [
        "epoch", "step", "total_us", "op_us", "op_count", "regions", *PART_COLUMNS, "compiles", *LIST_COLUMNS,
    ]  # fmt: skip
    if p.gpu.height:  # device time beside CPU time (analyze/gpu.py)
        by_op = gpu.with_gpu_by_op(by_op, p.gpu)
        by_layer = gpu.with_gpu_by_layer(by_layer, p.gpu)
        by_kernel = gpu.with_gpu_by_kernel(by_kernel, p.gpu)
        step_columns += ["gpu_us", (pl.col("total_us") - pl.col("gpu_us")).alias("gpu_idle_us")]
    if p.comm.height:  # collectives: compute, communication and their overlap per step (analyze/comm.py)
        hidden, total = pl.col("comm_hidden_us"), pl.col("comm_total_us")
        step_columns += [*COMM_NUMBER_COLUMNS,
                         pl.when(total > 0).then(hidden / total).otherwise(None).alias("overlap")]  # fmt: skip
    by_step, by_rank_step = ranks.job_steps(p.step, step_columns)
    stats = step_stats(by_step)
    by_process = p.process.sort(["rank", "host", "pid"], nulls_last=True).select(
        "pid", "host", "rank", "events", "op_us", "compile_us", "world_size", "run_us"
    )
    compile_rows = sorted(p.compile.iter_rows(), key=lambda r: _natural(r[0]))
    run_us = int(p.process.get_column("run_us").sum() or 0)
    compile_us = sum(int(r[1] or 0) for r in compile_rows)
    grand = compile_us + run_us
    cvr = pl.DataFrame(
        {
            "kind": ["compile"] * len(compile_rows) + ["run"],
            "compile_id": [r[0] for r in compile_rows] + [None],
            "total_us": [int(r[1] or 0) for r in compile_rows] + [run_us],
        },
        schema={"kind": pl.String, "compile_id": pl.String, "total_us": pl.Int64},
    ).with_columns((pl.col("total_us") / grand if grand else pl.lit(0.0)).alias("share"))
    rank_ids = sorted(int(r) for r in p.proc_file.get_column("rank").drop_nulls().unique().to_list())
    missing = [r for r in rank_ids if r not in explanations] if explanations else []
    m = p.meta
    span = (m.end_max - m.ts_min) if m.ts_min is not None and m.end_max is not None else 0
    meta = summary_meta(
        files=m.file_names,
        events=m.events,
        ops=m.ops,
        span_us=int(span),
        compile_us=compile_us,
        run_us=run_us,
        dropped_lines=m.dropped_lines,
        dropped_events=m.dropped_events,
        warnings=m.warnings + untraced_warnings(m.untraced) + (
            [(f"no explanation for rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))}: their "
              "recompiles and graph breaks come from the trace alone")] if missing else []),
    )
    return Summary(
        by_op=by_op,
        by_layer=by_layer,
        by_phase=by_phase,
        by_graph=by_graph,
        by_step=by_step,
        by_process=by_process,
        compile_vs_run=cvr,
        top=top,
        meta=meta,
        top_ops=by_op.head(top),
        by_kernel=by_kernel,
        sources=dict(m.sources),
        step_stats=stats,
        slow_steps=slow_steps(by_step, stats, by_rank_step),
        by_file=finish_files(p.file),
        by_device=gpu.by_device(p.gpu),
        gpu_launchers=gpu.launchers(p.gpu),
        # a job's costs add every rank's calls: per step is per rank's step (the ranks' steps counted)
        **_ranked_costs(cost_tables(p, _step_count(by_rank_step if by_rank_step.height else by_step),
                                    explanation, library_frames), explanations),
        by_rank_step=by_rank_step,
        by_rank=ranks.by_rank(p.proc_file, p.process, by_rank_step, explanations),
        divergence=ranks.divergence(by_rank_step, explanations, p.comm_seq, rank_ids),
        explanations=explanations,
        explanation_files=dict(explanation_files or {}),
        **comm_job.finish_tables(p.comm, p.comm_proc, m.ts_min),
        memory_by_graph=memory.by_graph(p.mem_graph, explanation),
        memory_by_step=memory.by_step(p.mem_step),
        memory_by_layer=memory.by_layer(explanation, p.mem_saved),
        out_of_memory=memory.out_of_memory(p.mem_oom),
    )


def _ranked_costs(tables: dict, explanations: dict[int, Report]) -> dict:
    """The recompile and graph-break tables with `ranks` (the ranks whose explanation has the row) where the
    ranks' explanations differ."""
    if len(explanations) < 2:
        return tables
    out = dict(tables)
    for attr, key in (("recompiles", "recompiles"), ("graph_breaks", "graph_breaks")):
        t = tables.get(attr)
        if t is None or t.height == 0:
            continue
        out[attr] = ranks.with_ranks(t, explanations, key)
    return out


def _step_count(by_step: pl.DataFrame) -> int:
    return step_rows(by_step).height


def untraced_warnings(untraced: dict[str, int]) -> list[str]:
    """One line saying how many graphs ran untraced and why: their ops and run time are missing here."""
    total = sum(untraced.values())
    if not total:
        return []
    why = "; ".join(reason if len(untraced) == 1 else f"{n}: {reason}" for reason, n in sorted(untraced.items()))
    graphs = "1 graph ran untraced, so its ops and run time are" if total == 1 else (
        f"{total} graphs ran untraced, so their ops and run time are")
    return [f"{graphs} not in these tables ({why})"]


def _by_op(h: pl.DataFrame) -> pl.DataFrame:
    keys = ["name", "cat"]
    if h.height == 0:
        return pl.DataFrame(
            schema={"name": pl.String, "cat": pl.String, "count": pl.Int64, "total_us": pl.Int64, "mean_us": pl.Float64,
                    "p50_us": pl.Int64, "p95_us": pl.Int64, "share": pl.Float64, "min_us": pl.Int64, "max_us": pl.Int64}
        )  # fmt: skip
    h = h.sort([*keys, "dur"], nulls_last=True).with_columns(
        pl.col("n").sum().over(keys).alias("cnt"), pl.col("n").cum_sum().over(keys).alias("cum")
    )
    out = h.group_by(keys).agg(
        pl.col("n").sum().alias("count"),
        (pl.col("n") * pl.col("dur")).sum().alias("total_us"),
        pl.col("dur").filter(pl.col("cum") * 100 >= pl.col("cnt") * 50).min().alias("p50_us"),
        pl.col("dur").filter(pl.col("cum") * 100 >= pl.col("cnt") * 95).min().alias("p95_us"),
        pl.col("dur").min().alias("min_us"),
        pl.col("dur").max().alias("max_us"),
    )
    return (
        out.with_columns((pl.col("total_us") / pl.col("count")).alias("mean_us"), _share())
        .sort(["total_us", "name", "cat"], descending=[True, False, False], nulls_last=True)
        .select("name", "cat", "count", "total_us", "mean_us", "p50_us", "p95_us", "share", "min_us", "max_us")
    )


def _by_kernel(h: pl.DataFrame) -> pl.DataFrame:
    """One row per kernel call site of a compiled graph: its events' count, times and what it covers."""
    keys = KERNEL_KEYS
    h = h.sort([*keys, "dur"], nulls_last=True).with_columns(
        pl.col("n").sum().over(keys).alias("cnt"), pl.col("n").cum_sum().over(keys).alias("cum")
    )
    out = h.group_by(keys).agg(
        pl.col("n").sum().alias("count"),
        (pl.col("n") * pl.col("dur")).sum().alias("total_us"),
        pl.col("dur").filter(pl.col("cum") * 100 >= pl.col("cnt") * 50).min().alias("p50_us"),
        pl.col("dur").max().alias("max_us"),
    )
    # "aten.add.Tensor,aten.mul.Tensor,prims.convert_element_type.default" -> "add, mul, convert_element_type"
    short = pl.col("target").fill_null("").str.split(",").list.eval(
        pl.element().str.split(".").list.get(1, null_on_oob=True)
    ).list.drop_nulls().list.unique(maintain_order=True).list.join(", ")
    return (
        out.with_columns(
            (pl.col("total_us") / pl.col("count")).cast(pl.Float64).alias("mean_us"), _share(), short.alias("fused")
        )
        .sort(["total_us", *keys], descending=[True] + [False] * len(keys), nulls_last=True)
        .select(
            "name", "kernel_kind", "compile_id", "graph", "phase", "count", "total_us", "mean_us", "p50_us", "max_us",
            "share", "fused", "layer", "module_type", "layers", "lines", "code", "target", "kernel_code",
        )
    )  # fmt: skip


def _natural(s):
    if s is None:
        return (1, ())
    parts = []
    for tok in str(s).replace("/", " / ").split():
        parts.append((0, int(tok), "") if tok.isdigit() else (1, 0, tok))
    return (0, tuple(parts))
