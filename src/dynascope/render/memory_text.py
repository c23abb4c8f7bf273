"""Memory in words (docs/memory.md): a run that ran out of memory (where it was: graph, op, layer, line; the
memory then; the few knobs that apply, each with the run's figure that supports it), what compiled keeps
for the backward against eager, and the one memory line of a run's summary."""

from __future__ import annotations

from typing import Any

from dynascope.analyze.summary import Summary
from dynascope.artifacts.memory import human_bytes

REPLAY = "cudagraph_replay"  # the op name of a CUDA-graph replay (capture/kernels.py)


def out_of_memory_lines(summary: Summary) -> list[str]:
    """One paragraph per process that ran out of memory: what happened, then "  - knob: why" lines."""
    out: list[str] = []
    for row in summary.table("out_of_memory").iter_rows(named=True):
        out.append(_headline(row))
        out += [f"  - {knob}" for knob in knobs(summary, row)]
    return out


def _headline(row: dict[str, Any]) -> str:
    who = f"rank {row['rank']}" if row["rank"] is not None else f"process {row['pid']}"
    where = "outside the compiled graphs"
    if row["graph"]:
        where = f"in {row['graph']} {row['phase'] or ''}".rstrip()
        if row["op"]:
            at = f", {row['file']}:{row['line']}" if row["file"] and row["line"] else ""
            layer = f"layer {row['layer']}" if row["layer"] else "no layer"
            where += f", op {row['op']} ({layer}{at})"
    memory = f"; memory in use then {human_bytes(row['memory'])}" if row["memory"] is not None else ""
    return f"Out of memory: {who} stopped with {row['error']} {where}{memory}"


def knobs(summary: Summary, row: dict[str, Any]) -> list[str]:
    """The knobs that apply to that ending (`row`, out_of_memory's), each with its figure: what the graph that was
    running keeps for the backward (else every graph), dynamic shapes, CUDA graphs."""
    out = []
    graphs = summary.table("memory_by_graph")
    forward = graphs.filter(graphs["phase"] == "forward") if graphs.height else graphs
    running = forward.filter(forward["graph"] == row["graph"]) if forward.height and row["graph"] else forward
    kept = running if running.height and running["saved_bytes"].fill_null(0).sum() else forward
    saved = int(kept["saved_bytes"].fill_null(0).sum()) if kept.height else 0
    layers = summary.table("memory_by_layer")
    if saved:
        whose = f"{row['graph']}'s forward" if kept is running and row["graph"] else "the compiled forwards"
        biggest = layers.sort("saved_bytes", descending=True, nulls_last=True).row(0, named=True) if layers.height \
            else None
        most = f"; most in {biggest['layer']} ({human_bytes(biggest['saved_bytes'])})" if biggest else ""
        out.append(f"activation memory: {whose} keeps {human_bytes(saved)} for the backward{most}."
                   " torch._functorch.config.activation_memory_budget = 0.5 (below 1) lets the partitioner "
                   "recompute more instead; torch.utils.checkpoint on the biggest layer does it by hand")  # fmt: skip
        out.append(f"a smaller batch: saved activations and the estimated peaks grow with it ({human_bytes(saved)} "
                   "saved at this batch); halve it, or accumulate gradients over two half batches")  # fmt: skip
    symbolic = forward.filter(forward["symbolic"].fill_null(False)) if "symbolic" in forward.columns else forward[:0]
    if symbolic.height:
        out.append(f"dynamic shapes: {symbolic.height} graph(s) compiled with symbolic sizes; try "
                   "torch.compile(..., dynamic=False) (or TORCHDYNAMO_DYNAMIC_SHAPES=0), as torch's own advice on "
                   "OOMs starts")  # fmt: skip
    ops = summary.table("by_op")
    replays = ops.filter(ops["name"] == REPLAY) if ops.height else ops
    if replays.height:
        out.append(f"CUDA graphs: {int(replays['count'].sum())} graph replays ran (mode='reduce-overhead'), each "
                   "shape keeping its own memory pool; try without them "
                   "(torch._inductor.config.triton.cudagraphs = False)")  # fmt: skip
    if not out:
        out.append("no compiled graph saved anything for the backward in this run: the memory went elsewhere "
                   "(the batch, the optimizer's state, tensors the program keeps); the memory per step table "
                   "shows when it grew")  # fmt: skip
    return out


def _per(graphs: int) -> str:
    """How a sum of saved bytes reads: one graph's is a step's; several graphs' (graph breaks, recompiles) is their
    sum, which one step need not hold at once."""
    return "a step" if graphs <= 1 else f"over {graphs} graphs"


def vs_eager_lines(summary: Summary) -> list[str]:
    """Where an eager run was compared: the two runs' step peaks, then what each keeps for the backward."""
    peaks = peaks_vs_eager_line(summary)
    return ([peaks] if peaks else []) + saved_vs_eager_lines(summary)


def peaks_vs_eager_line(summary: Summary) -> str | None:
    """"Peak memory: compiled X, eager Y": the highest step peak of each run after the first step (the first
    compiles), and the first step's apart; None without both runs' memory samples."""
    steps = summary.table("memory_by_step")
    if not steps.height or "eager_peak" not in steps.columns or steps["eager_peak"].null_count() == steps.height:
        return None
    first = steps["step"].min()
    first = int(first) if first is not None else None  # type: ignore[arg-type]
    later = steps.filter(steps["step"] > first) if first is not None else steps[:0]
    parts = []
    if later.height:
        parts.append(f"{_against(later)} at the highest step after the first")
    opening = steps.filter(steps["step"] == first) if first is not None else steps
    if opening.height:
        parts.append(f"step {first}, where the compiled run compiles: {_against(opening)}")
    return "Peak memory against eager: " + "; ".join(parts)


def _against(steps: Any) -> str:
    mine, theirs = steps["peak_max"].max(), steps["eager_peak"].max()
    if mine is None or theirs is None:
        return "no figure for one of the runs"
    word = "less" if mine < theirs else "more"
    difference = "the same" if mine == theirs else f"{human_bytes(abs(mine - theirs))} {word}"
    return f"compiled {human_bytes(mine)}, eager {human_bytes(theirs)} ({difference})"


def saved_vs_eager_lines(summary: Summary) -> list[str]:
    """Where an eager run was compared: "compiled saves X for the backward, eager Y", and per layer where they
    differ, by how much and (from the explanation) why: what the partitioner recomputes there, or the
    tensors compiled keeps there."""
    layers = summary.table("memory_by_layer")
    if not layers.height or "eager_saved_bytes" not in layers.columns:
        return []
    compiled = int(layers["saved_bytes"].fill_null(0).sum())
    eager = int(layers["eager_saved_bytes"].fill_null(0).sum())
    verdict = "the same" if compiled == eager else (
        f"{human_bytes(abs(compiled - eager))} {'less' if compiled < eager else 'more'}")
    out = [(f"Memory kept for the backward: compiled saves {human_bytes(compiled)} {_per(_graphs(summary))}, eager "
            f"{human_bytes(eager)} in one forward ({verdict})")]  # fmt: skip
    for row in layers.iter_rows(named=True):
        mine, theirs = row["saved_bytes"] or 0, row["eager_saved_bytes"] or 0
        if mine != theirs:
            figures = f"compiled {human_bytes(mine)}, eager {human_bytes(theirs)}"
            out.append(f"  - {row['layer']}: {figures}: {_why(row, mine, theirs)}")
    return out


def _why(row: dict[str, Any], mine: int, theirs: int) -> str:
    if mine < theirs:
        recomputed = row.get("recomputed")
        return f"the partitioner recomputes {recomputed} in the backward instead" if recomputed else \
            "compiled keeps fewer tensors here"
    return (f"compiled keeps {row.get('saved') or 'more'} here: a fused kernel's buffer, or a recomputation the "
            "partitioner chose not to do (torch._functorch.config.activation_memory_budget below 1 asks for more)")


def memory_line(summary: Summary) -> str | None:
    """One line for a run's summary: the highest step peak and what ran then, and what the compiled graphs keep
    for the backward a step (the layer that keeps most); None without either."""
    parts = []
    steps = summary.table("memory_by_step")
    if steps.height:
        top = steps.sort("peak_max", descending=True).row(0, named=True)
        parts.append(f"peak {human_bytes(top['peak_max'])} in step {top['step']} ({top['peak_at']})")
    layers = summary.table("memory_by_layer")
    saved = int(layers["saved_bytes"].fill_null(0).sum()) if layers.height else 0
    if saved:
        most = layers.sort("saved_bytes", descending=True, nulls_last=True).row(0, named=True)
        parts.append(f"the compiled graphs keep {human_bytes(saved)} {_per(_graphs(summary))} for the backward "
                     f"(most in {most['layer']}: {human_bytes(most['saved_bytes'])})")  # fmt: skip
    return "Memory: " + "; ".join(parts) if parts else None


def _graphs(summary: Summary) -> int:
    """How many compiled graphs save something for the backward."""
    graphs = summary.table("memory_by_graph")
    if not graphs.height:
        return 1
    return graphs.filter((graphs["phase"] == "forward") & (graphs["saved_bytes"].fill_null(0) > 0)).height
