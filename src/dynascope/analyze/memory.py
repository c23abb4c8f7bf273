"""Memory: the trace's samples of memory in use (trace/memory.py, "cat":"memory") joined to graph calls and
steps, and the explanation's account of what each graph saves for the backward (artifacts/memory.py).

Per file (mergeable, analyze/partial.py): `mem_graph`, per graph and phase, the calls, the highest sample
within a call and what the calls left in use (end minus start); `mem_step`, per step, the highest sample and
what was running at it. The figures are the process's resident set size (or, on a GPU, the caching
allocator's allocated bytes): docs/memory.md says what they miss.
"""

from __future__ import annotations

import numpy as np
import orjson
import polars as pl

from dynascope.analyze.read.columns import AUTOGRAD_CAT, COMPILE_CAT, DATA_CAT, GRAPH_CAT, MEMORY_CAT, OPTIMIZER_CAT
from dynascope.artifacts.explanation import Report
from dynascope.artifacts.memory import GraphMemory, saved_by_layer

SAMPLE_COLUMNS = ["rss", "cuda_allocated", "cuda_reserved"]
END_COLUMNS = ["exit_error", "running", "oom", "rss_at_end"]  # the end record's account of an error (trace/session.py)
SAVED_COLUMN = "saved_bytes"  # eager autograd's saved tensors per layer (capture/memory.py EagerSaved)
_OOM_KEYS = ["rank", "pid", "error", "graph", "phase", "op", "layer", "file", "line"]
KEYS = {"mem_graph": ["rank", "compile_id", "graph", "phase"], "mem_step": ["rank", "step"], "mem_oom": _OOM_KEYS,
        "mem_saved": ["rank", "layer"]}
SCHEMAS: dict[str, dict[str, pl.DataType | type[pl.DataType]]] = {
    "mem_graph": {"rank": pl.Int64, "compile_id": pl.String, "graph": pl.String, "phase": pl.String,
                  "calls": pl.Int64, "grew": pl.Int64, "peak_max": pl.Int64},
    "mem_step": {"rank": pl.Int64, "step": pl.Int64, "peak_max": pl.Int64, "peak_at": pl.String},
    "mem_oom": {**dict.fromkeys(_OOM_KEYS, pl.String), "rank": pl.Int64, "pid": pl.Int64, "line": pl.Int64,
                "n": pl.Int64, "rss_max": pl.Int64},
    "mem_saved": {"rank": pl.Int64, "layer": pl.String, "saved_max": pl.Int64},
}  # fmt: skip
# what a peak is charged to, innermost first
_RUNNING_CATS = [GRAPH_CAT, COMPILE_CAT, AUTOGRAD_CAT, OPTIMIZER_CAT, DATA_CAT]


def split_samples(rows: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(the memory samples, every other row) of one file's rows."""
    is_sample = (pl.col("cat").cast(pl.String) == MEMORY_CAT).fill_null(False)
    return rows.filter(is_sample), rows.filter(~is_sample)


def samples(rows: pl.DataFrame) -> pl.DataFrame:
    """pid, ts, value: memory samples (split_samples) as one series, the GPU's allocated bytes where there are
    any, else the resident set size, in time order."""
    cuda = rows.filter(pl.col("cuda_allocated").is_not_null())
    picked = cuda if cuda.height else rows.filter(pl.col("rss").is_not_null())
    column = "cuda_allocated" if cuda.height else "rss"
    return picked.select("pid", "ts", pl.col(column).alias("value")).sort("pid", "ts")


def frame_tables(others: pl.DataFrame, sample_rows: pl.DataFrame, ranks: pl.DataFrame,
                 windows: pl.DataFrame) -> dict[str, pl.DataFrame]:  # fmt: skip
    """The memory tables of one file: `others` its event rows, `sample_rows` its memory samples, `ranks` pid ->
    rank, `windows` its step windows (pid, ts, dur, step)."""
    points = samples(sample_rows)
    tables = {name: pl.DataFrame(schema=schema) for name, schema in SCHEMAS.items()}
    tables["mem_oom"] = _oom_table(others, ranks)
    tables["mem_saved"] = _saved_table(sample_rows, ranks)
    if points.height:
        tables["mem_graph"] = _graph_table(others, points, ranks)
        tables["mem_step"] = _step_table(others, points, ranks, windows)
    return tables


def _saved_table(sample_rows: pl.DataFrame, ranks: pl.DataFrame) -> pl.DataFrame:
    """Per layer, what eager autograd saved for the backward in one forward at most (an eager run's trace)."""
    rows = sample_rows.filter(pl.col(SAVED_COLUMN).is_not_null())
    if rows.height == 0:
        return pl.DataFrame(schema=SCHEMAS["mem_saved"])
    table = rows.join(ranks, on="pid", how="left").group_by("rank", pl.col("layer").cast(pl.String)).agg(
        pl.col(SAVED_COLUMN).max().alias("saved_max"))
    return table.select([pl.col(c).cast(t) for c, t in SCHEMAS["mem_saved"].items()])


def _oom_table(others: pl.DataFrame, ranks: pl.DataFrame) -> pl.DataFrame:
    """The processes whose program ended out of memory, with what their main thread was running then."""
    ends = others.filter((pl.col("cat").cast(pl.String) == "dftracer") & (pl.col("name").cast(pl.String) == "end")
                         & (pl.col("oom").cast(pl.Int64, strict=False) == 1))  # fmt: skip
    rows = []
    for pid, error, running, rss in ends.select("pid", "exit_error", "running", "rss_at_end").iter_rows():
        calls = _json_list(running)
        call = next((c for c in calls if c.get("tid") == pid), calls[0] if calls else {})  # the main thread's first
        rows.append({"pid": pid, "error": error, "graph": call.get("graph"), "phase": call.get("phase"),
                     "op": call.get("op"), "layer": call.get("layer"), "file": call.get("file"),
                     "line": call.get("line"), "n": 1, "rss_max": rss})  # fmt: skip
    if not rows:
        return pl.DataFrame(schema=SCHEMAS["mem_oom"])
    table = pl.DataFrame(rows, schema={k: v for k, v in SCHEMAS["mem_oom"].items() if k != "rank"})
    return table.join(ranks, on="pid", how="left").select([pl.col(c).cast(t) for c, t in SCHEMAS["mem_oom"].items()])


def _json_list(value: object) -> list[dict]:
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            return []
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _graph_table(others: pl.DataFrame, points: pl.DataFrame, ranks: pl.DataFrame) -> pl.DataFrame:
    calls = others.filter(pl.col("cat").cast(pl.String) == GRAPH_CAT).select(
        "pid", "ts", "dur", pl.col("compile_id").cast(pl.String), pl.col("graph").cast(pl.String),
        pl.col("phase").cast(pl.String))  # fmt: skip
    if calls.height == 0:
        return pl.DataFrame(schema=SCHEMAS["mem_graph"])
    start, peak, end = _windows(points, calls)
    table = calls.with_columns(
        pl.Series("grew", end - start),
        pl.Series("peak", peak),
        pl.Series("sampled", start >= 0),
    ).filter(pl.col("sampled"))
    out = (table.join(ranks, on="pid", how="left")
           .group_by(KEYS["mem_graph"])
           .agg(pl.len().cast(pl.Int64).alias("calls"), pl.col("grew").sum(), pl.col("peak").max().alias("peak_max")))
    return out.select([pl.col(c).cast(t) for c, t in SCHEMAS["mem_graph"].items()])


def _windows(points: pl.DataFrame, calls: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each call: the last sample at or before its start (-1: none), the highest from then to its end, and
    the last at or before its end."""
    n = calls.height
    start, peak, end = np.full(n, -1, np.int64), np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    pids = calls.get_column("pid").to_numpy()
    ts = calls.get_column("ts").to_numpy()
    ends = ts + calls.get_column("dur").fill_null(0).to_numpy()
    for (pid,), mine in points.partition_by("pid", as_dict=True).items():
        t = mine.get_column("ts").to_numpy()
        v = mine.get_column("value").to_numpy()
        rows = np.flatnonzero(pids == pid)
        a = np.searchsorted(t, ts[rows], side="right") - 1
        b = np.searchsorted(t, ends[rows], side="right") - 1
        for row, i, j in zip(rows.tolist(), a.tolist(), b.tolist(), strict=True):
            if i < 0:
                continue
            start[row], end[row] = v[i], v[j]
            peak[row] = v[i : j + 1].max()
    return start, peak, end


def _step_table(others: pl.DataFrame, points: pl.DataFrame, ranks: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Per step window: the highest sample in it, or, where none was kept in it, the last one before it (the
    sampler keeps every move of DYNASCOPE_MEMORY_STEP_KB, so memory stayed within that of it), and what ran at
    that sample."""
    rows = []
    for (pid,), mine in points.partition_by("pid", as_dict=True).items():
        steps = windows.filter(pl.col("pid") == pid)
        if steps.height == 0:
            continue
        t, v = mine.get_column("ts").to_numpy(), mine.get_column("value").to_numpy()
        a = steps.get_column("ts").to_numpy()
        b = a + steps.get_column("dur").fill_null(0).to_numpy()
        first = np.maximum(np.searchsorted(t, a, side="right") - 1, 0)
        last = np.searchsorted(t, b, side="right") - 1
        running = _Running(others, pid)
        for step, i, j, start in zip(steps.get_column("step").to_list(), first.tolist(), last.tolist(), a.tolist(),
                                     strict=True):  # fmt: skip
            if j < 0:
                continue
            k = i + int(np.argmax(v[i : j + 1]))
            at = running.at(int(t[k])) if t[k] >= start else STEADY
            rows.append({"pid": pid, "step": step, "peak_max": int(v[k]), "peak_at": at})
    if not rows:
        return pl.DataFrame(schema=SCHEMAS["mem_step"])
    table = pl.DataFrame(rows, schema={"pid": pl.Int64, "step": pl.Int64, "peak_max": pl.Int64, "peak_at": pl.String})
    out = table.join(ranks, on="pid", how="left").group_by(KEYS["mem_step"]).agg(
        pl.col("peak_max").max(), pl.col("peak_at").sort_by("peak_max").last())
    return out.select([pl.col(c).cast(t) for c, t in SCHEMAS["mem_step"].items()])


STEADY = "steady all step"  # no sample moved in it by DYNASCOPE_MEMORY_STEP_KB


class _Running:
    """What ran at a time on one process: the innermost graph call, else compile, else step part (backward,
    optimizer, data loading) whose event covers it, else "between graphs"."""

    def __init__(self, others: pl.DataFrame, pid: int) -> None:
        spans = others.filter((pl.col("pid") == pid) & pl.col("cat").cast(pl.String).is_in(_RUNNING_CATS))
        self.ts = spans.get_column("ts").to_numpy()
        self.end = self.ts + spans.get_column("dur").fill_null(0).to_numpy()
        self.cat = spans.get_column("cat").cast(pl.String).to_list()
        self.label = [f"{g} {p}" if c == GRAPH_CAT and g else f"compiling {i}" if c == COMPILE_CAT and i else str(n)
                      for c, g, p, n, i in spans.select(
            pl.col("cat").cast(pl.String), pl.col("graph").cast(pl.String), pl.col("phase").cast(pl.String),
            pl.col("name").cast(pl.String), pl.col("compile_id").cast(pl.String)).iter_rows()]  # fmt: skip

    def at(self, ts: int) -> str:
        covering = np.flatnonzero((self.ts <= ts) & (self.end >= ts))
        for cat in _RUNNING_CATS:
            picks = [k for k in covering.tolist() if self.cat[k] == cat]
            if picks:
                return self.label[max(picks, key=lambda k: self.ts[k])]
        return "between graphs"


# -- Summary tables --------------------------------------------------------------------------------


def by_graph(mem_graph: pl.DataFrame, explanation: Report | None) -> pl.DataFrame:
    """Per graph and phase: calls, the highest sample within a call, what a call left in use on average, and
    from the explanation the estimated peak of that phase and the bytes the forward saves."""
    estimates = _estimates(explanation.memory if explanation is not None else [])
    table = (mem_graph.group_by("compile_id", "graph", "phase")
             .agg(pl.col("calls").sum(), pl.col("grew").sum(), pl.col("peak_max").max()))  # fmt: skip
    table = table.join(estimates, on=["compile_id", "graph", "phase"], how="full", coalesce=True)
    return table.with_columns(
        pl.when(pl.col("calls") > 0).then(pl.col("grew") / pl.col("calls")).otherwise(None).alias("grew_per_call"),
    ).sort(["compile_id", "graph", "phase"], nulls_last=True).select(
        "compile_id", "graph", "phase", "calls", "peak_max", "grew_per_call", "estimated_peak", "inductor_peak",
        "saved_bytes", "symbolic",
    )  # fmt: skip


def _estimates(graphs: list[GraphMemory]) -> pl.DataFrame:
    rows = []
    for g in graphs:
        name = g.graph  # a DDP piece's is the trace's "__compiled_fn_1[ddp 2/4]"
        for phase, peak, saved in (("forward", g.forward_peak, g.saved_bytes), ("backward", g.backward_peak, None)):
            rows.append({"compile_id": g.compile_id, "graph": name, "phase": phase,
                         "estimated_peak": peak.bytes if peak else None,
                         "inductor_peak": peak.inductor_bytes if peak else None, "saved_bytes": saved,
                         "symbolic": g.symbolic})  # fmt: skip
    schema = {"compile_id": pl.String, "graph": pl.String, "phase": pl.String, "estimated_peak": pl.Int64,
              "inductor_peak": pl.Int64, "saved_bytes": pl.Int64, "symbolic": pl.Boolean}  # fmt: skip
    return pl.DataFrame(rows, schema=schema)


def by_step(mem_step: pl.DataFrame) -> pl.DataFrame:
    """Per step (and rank, where there are ranks): the highest sample and what ran then."""
    table = mem_step.sort(["rank", "step"], nulls_last=True).select("rank", "step", "peak_max", "peak_at")
    return table if table.get_column("rank").null_count() < table.height else table.drop("rank")


def out_of_memory(mem_oom: pl.DataFrame) -> pl.DataFrame:
    """rank, pid, error, graph, phase, op, layer, file, line, memory (resident at the end): each process that
    ended out of memory."""
    table = mem_oom.sort(["rank", "pid"], nulls_last=True).rename({"rss_max": "memory"})
    return table.select("rank", "pid", "error", "graph", "phase", "op", "layer", "file", "line", "memory")


TOP_LEVEL = "(top level)"  # the layer of what the compiled module's own forward computes


def by_layer(explanation: Report | None, mem_saved: pl.DataFrame | None = None) -> pl.DataFrame:
    """layer, saved_bytes, tensors, saved (their names and shapes), recomputed (forward ops the backward runs
    again there): what the compiled graphs save for the backward per layer (from the explanation's account of
    every graph); eager_saved_bytes: what eager autograd saved in one forward at most, where the trace is of
    an eager run (--compare-eager's)."""
    graphs = explanation.memory if explanation is not None else []
    rows = saved_by_layer(graphs)
    names: dict[str, list[str]] = {}
    recomputed: dict[str, list[str]] = {}
    for g in graphs:
        for t in g.saved:
            if t.kind == "activation":
                names.setdefault(t.layer, []).append(f"{t.name} {t.shape}")
        for r in g.recomputed:
            recomputed.setdefault(r.layer, []).append(r.name)
    table = pl.DataFrame(
        {"layer": [r.layer or TOP_LEVEL for r in rows], "saved_bytes": [r.bytes for r in rows],
         "tensors": [r.tensors for r in rows], "saved": [", ".join(names.get(r.layer, [])) for r in rows],
         "recomputed": [", ".join(recomputed.get(r.layer, [])) or None for r in rows]},
        schema={"layer": pl.String, "saved_bytes": pl.Int64, "tensors": pl.Int64, "saved": pl.String,
                "recomputed": pl.String},
    )  # fmt: skip
    extra = [layer for layer in recomputed if layer not in {r.layer for r in rows}]  # recomputes, saves nothing
    if extra:
        table = pl.concat([table, pl.DataFrame(
            {"layer": [layer or TOP_LEVEL for layer in extra], "saved_bytes": [0] * len(extra),
             "tensors": [0] * len(extra), "saved": [""] * len(extra),
             "recomputed": [", ".join(recomputed[layer]) for layer in extra]}, schema=table.schema)])  # fmt: skip
    if mem_saved is None or mem_saved.height == 0:
        return table
    eager = mem_saved.group_by(pl.col("layer").replace("", TOP_LEVEL)).agg(  # a rank's figure: the most any rank saved
        pl.col("saved_max").max().alias("eager_saved_bytes"))
    return table.join(eager, on="layer", how="full", coalesce=True).sort(
        pl.max_horizontal("saved_bytes", "eager_saved_bytes"), descending=True, nulls_last=True)


def with_eager_saved(compiled: pl.DataFrame, eager: pl.DataFrame) -> pl.DataFrame:
    """The compiled run's memory_by_layer with the eager run's eager_saved_bytes beside it."""
    if "eager_saved_bytes" not in eager.columns or eager.height == 0:
        return compiled
    mine = compiled.drop("eager_saved_bytes", strict=False)
    theirs = eager.select("layer", "eager_saved_bytes")
    return mine.join(theirs, on="layer", how="full", coalesce=True).sort(
        pl.max_horizontal("saved_bytes", "eager_saved_bytes"), descending=True, nulls_last=True)


def with_eager_peaks(compiled: pl.DataFrame, eager: pl.DataFrame) -> pl.DataFrame:
    """The compiled run's memory_by_step with the eager run's peak of the same step beside it (eager_peak)."""
    if not compiled.height or not eager.height or "peak_max" not in eager.columns:
        return compiled
    keys = [k for k in ("rank", "step") if k in compiled.columns and k in eager.columns]
    theirs = eager.select(*keys, pl.col("peak_max").alias("eager_peak"))
    return compiled.drop("eager_peak", strict=False).join(theirs, on=keys, how="left", nulls_equal=True)

