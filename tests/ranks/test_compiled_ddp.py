"""Compiled DDP on every rank (issue 26, item 3): DDPOptimizer's split of a graph at DDP's buckets named apart
from the user's graph breaks, with its buckets, cost and knobs; functional collectives in compiled graphs
carrying their comm fields; and on each rank's trace the graphs, ops, layers, steps and break costs one
process gets. Real runs: torchrun (gloo, CPU, 2 ranks), `dynascope run` on each rank."""

from __future__ import annotations

import glob
import gzip
import json
import os
import sys
from pathlib import Path

import pytest
import torch
from support.cli import dynascope_here
from support.invariants import check, collect, report

from .launch import BIN, program, torchrun

BUCKET_CAP_MB = 1  # Net(512): four 1 MiB Linear layers and a head -> four buckets (DDP's and DDPOptimizer's)
DDP_KIND = "ddp split"
# before 2.9 torch gives no user stack for a guard or for a break in DDP's own code (DDP.forward run by
# torch.compile(DDP(model))): such a row keeps torch's line (the function's line, the library's line)
OLD_TORCH = tuple(map(int, torch.__version__.split(".")[:2])) < (2, 9)


def _run(tmp_path: Path, *args: str, backend: str = "aot_eager") -> Path:
    """`torchrun --no-python dynascope run --out OUT ...` on 2 ranks: one trace per rank in OUT, one explanation
    per rank in OUT/rank<R>, one job report; every invariant of the outputs holds."""
    out = tmp_path / "out"
    done = torchrun(["--no-python", str(BIN / "dynascope"), "run", "--backend", backend, "--out", str(out),
                     program("ddp_train.py"), "--bucket-cap-mb", str(BUCKET_CAP_MB), *args],
                    cwd=tmp_path, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    failures = check(collect(out, done.stdout))
    if OLD_TORCH:
        failures = [f for f in failures if not (f.startswith("[user frame]") and "torch/nn/parallel" in f)]
    assert not failures, f"{len(failures)} invariants broken:" + report(failures)
    return out


def _one(pattern: str) -> str:
    found = glob.glob(pattern)
    assert len(found) == 1, (pattern, found)
    return found[0]


def _trace(out: Path, rank: int) -> str:
    return _one(f"{out}/ddp_train-rank{rank}-*.pfw.gz")


def _explanation(out: Path, rank: int) -> dict:
    with open(_one(f"{out}/rank{rank}/explanation.json"), encoding="utf-8") as f:
        return json.load(f)


def _records(path: str) -> tuple[list[dict], list[dict]]:
    """(OH records' args, every other event) of one trace file."""
    oh, events = [], []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            line = line.strip().rstrip(",")
            if not line.startswith("{"):
                continue
            event = json.loads(line)
            (oh if event.get("name") == "OH" else events).append(event.get("args", {}) if event.get("name") == "OH"
                                                                 else event)  # fmt: skip
    return oh, events


def _summary(out: Path, rank: int) -> dict:
    """`dynascope report --json` of one rank's trace (its explanation beside it read)."""
    trace = _trace(out, rank)
    explanation = _one(f"{out}/rank{rank}/explanation.json")
    done = dynascope_here("report", "--json", "--explanation", explanation, trace)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _ddp_buckets(cap_mb: float) -> int:
    """How many buckets DDP's rule makes of Net(512)'s parameters at this cap: in reverse parameter order, a
    bucket closes once it holds at least the cap (the first one at most torch's 1 MiB first-bucket cap)."""
    layer = [512 * 4, 512 * 512 * 4]  # a Linear(512, 512)'s bias and weight, float32
    sizes = [10 * 4, 512 * 10 * 4] + layer * 4  # the head's, then the four layers', last first
    cap = int(cap_mb * 2**20)
    caps, buckets, size = [min(cap, 2**20)], 0, 0
    for n in sizes:
        size += n
        if size >= (caps[0] if buckets == 0 else cap):
            buckets, size = buckets + 1, 0
    return buckets + (1 if size else 0)


def _reducer_buckets(events: list[dict]) -> set[int]:
    """The bucket indexes of DDP's own all-reduces in the trace (the collectives capture's `bucket`)."""
    return {e["args"]["bucket"] for e in events if e.get("cat") == "comm" and e.get("args", {}).get("source") == "ddp"}


def _check_ddp_split(out: Path, rank: int, graph_names_ids: int = 1) -> dict:
    """What every rank's outputs say of DDPOptimizer's split (4 buckets); the split row of the summary."""
    oh, events = _records(_trace(out, rank))
    graphs = [r for r in oh if r.get("kind") == "graph" and "ddp_split" in r]
    forward = [r for r in graphs if r["phase"] == "forward"]
    buckets = _ddp_buckets(BUCKET_CAP_MB)
    assert buckets == 4
    # DDP's reducer all-reduced its buckets (after its first step it rebuilds them in the order gradients
    # became ready, which under a split compiled backward gives other boundaries: 5 here)
    assert len(_reducer_buckets(events)) >= 1
    # one piece per DDP bucket, each with its own name, bucket, parameters and the cap in force
    assert len(forward) == buckets, [r["graph"] for r in forward]
    assert len({r["graph"] for r in forward}) == buckets
    assert len({r["compile_id"] for r in forward}) == graph_names_ids
    assert sorted(r["ddp_split"] for r in forward) == [1, 2, 3, 4]
    assert {r["ddp_splits"] for r in forward} == {4}
    assert sorted(r["ddp_bucket"] for r in forward) == [0, 1, 2, 3]
    assert all(r["graph"].endswith(f"[ddp {r['ddp_split']}/4]") for r in forward)
    assert all(r["ddp_cap_bytes"] == BUCKET_CAP_MB * 2**20 for r in forward)
    first = min(forward, key=lambda r: r["ddp_split"])
    last = max(forward, key=lambda r: r["ddp_split"])
    assert first["ddp_layers"] == "layers.0.0.weight..layers.0.0.bias"
    assert last["ddp_layers"] == "layers.3.0.weight..head.bias" and last["ddp_params"] == 4
    assert first["ddp_bytes"] == (512 * 512 + 512) * 4
    # the pieces' ops carry their piece's name, and the backward graphs are named as their forward pieces
    pieces = {r["graph"] for r in forward}
    assert {r["graph"] for r in graphs if r["phase"] == "backward"} == pieces
    ops = [r for r in oh if r.get("kind") in ("op", "kernel") and r.get("compile_id") == first["compile_id"]]
    assert {r["graph"] for r in ops} == pieces

    expl = _explanation(out, rank)
    (split,) = expl["ddp_splits"]
    assert split["graphs"] == 4 and split["cap_bytes"] == BUCKET_CAP_MB * 2**20
    assert split["buckets"][0]["layers"] == first["ddp_layers"]
    # not a user break (torch names DDPOptimizer's compile reason "DDPOptimizer intentional graph-break")
    assert not [b for b in expl["graph_breaks"] if "ddpoptimizer" in str(b).lower() or "bucket" in str(b).lower()]

    summary = _summary(out, rank)
    rows = summary["graph_breaks"]
    (row,) = [r for r in rows if r["kind"] == DDP_KIND]
    assert row["reason"] == f"DDP split the graph at 3 bucket boundaries (bucket_cap_mb={BUCKET_CAP_MB}): 4 graphs instead of 1"
    assert "bucket_cap_mb" in row["fix"] and "optimize_ddp" in row["fix"] and "compiled_autograd" in row["fix"]
    assert row["compile_ids"] == [first["compile_id"]]
    assert row["calls"] >= 2 and row["total_us"] > 0 and row["per_call_us"] > 0  # the time between the pieces
    # Net.forward: its first line (2.13) or its def line (2.5.1, 2.15: torch names no line of the graph's)
    assert row["source"] in ("ddp_train.py:37", "ddp_train.py:36")
    assert not [r for r in rows if r["kind"] != DDP_KIND and "ddp split" in str(r["reason"]).lower()]
    # the usual tables are there for this rank: its graphs (the pieces), layers, steps
    by_graph = {r["graph"] for r in summary["by_graph"]}
    assert pieces <= by_graph
    layers = {r["layer"] for r in summary["by_layer"]}
    assert {"layers.0.0", "layers.3.0", "head"} <= layers
    assert len(summary["by_step"]) >= 3
    # what each piece saves for the backward: its own account, joined to its graph calls by the trace's name
    memory = {r["graph"]: r for r in summary["memory_by_graph"] if r["phase"] == "forward"}
    assert {g for g in memory if memory[g]["saved_bytes"] is not None} == pieces, memory
    assert all(memory[g]["calls"] >= 3 and memory[g]["saved_bytes"] > 0 for g in pieces), memory
    return row


def _check_functional(out: Path, rank: int, kind: str) -> None:
    """The functional collectives of ddp_train.py's reduce_stats (dist.all_reduce of a sum, funcol.all_reduce
    of a max: both float32 scalars) and their waits carry comm_op/comm_pg/comm_bytes/comm_key."""
    oh, _ = _records(_trace(out, rank))
    comm = [r for r in oh if r.get("kind") == kind and "comm_op" in r]
    issued = [r for r in comm if "wait_tensor" not in r["target"]]
    waits = [r for r in comm if "wait_tensor" in r["target"]]
    assert len(issued) == 2 and len(waits) == 2, comm
    assert {r["comm_op"] for r in comm} == {"all_reduce"}
    assert {r["comm_bytes"] for r in comm} == {4}
    assert {r["comm_pg"] for r in comm} == {"0"}  # the default group's name
    assert {r["comm_key"] for r in waits} == {r["comm_key"] for r in issued} == {r["node"] for r in issued}
    # nothing else in the trace claims to be a collective
    assert not [r for r in oh if "comm_op" in r and "_c10d_functional" not in r.get("target", "")]


def test_ddp_inside_splits_named_and_costed_functional_collectives(tmp_path: Path) -> None:
    """DDP(torch.compile(model)) under aot_eager on 2 ranks, with a compiled function of collectives."""
    out = _run(tmp_path, "--steps", "4", "--functional")
    for rank in (0, 1):
        _check_ddp_split(out, rank)
        _check_functional(out, rank, "op")


def test_ddp_outside_split_and_ddp_advice(tmp_path: Path) -> None:
    """torch.compile(DDP(model)): Dynamo compiles the module inside DDP (split as above); what it cannot
    compile is DDP's own code, and the advice says so (not 'avoid calling Logger...', not 'run explain')."""
    out = _run(tmp_path, "--steps", "4", "--wrap", "outside")
    for rank in (0, 1):
        _check_ddp_split(out, rank)
        rows = _summary(out, rank)["graph_breaks"]
        ddp_code = [r for r in rows if r["kind"] != DDP_KIND and "distributed.py" in str(r.get("library") or "")
                    + str(r.get("file") or "") + str(r.get("detail") or "")]  # fmt: skip
        assert ddp_code, rows
        for r in ddp_code:
            assert "DDP(torch.compile(model))" in r["fix"], r
            assert "dynascope explain" not in r["fix"] and "Avoid calling" not in r["fix"], r


@pytest.mark.slow
@pytest.mark.parametrize("wrap", ["inside", "outside"])
def test_ddp_inductor(tmp_path: Path, wrap: str) -> None:
    """The same under inductor: the pieces are inductor graphs, the collectives inductor's fallback kernels."""
    out = _run(tmp_path, "--steps", "3", "--functional", "--wrap", wrap, backend="inductor")
    for rank in (0, 1):
        _check_ddp_split(out, rank)
        _check_functional(out, rank, "kernel")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([os.path.abspath(__file__), "-q"]))
