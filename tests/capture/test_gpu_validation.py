"""The GPU validation (benchmarks/gpu_validation/validate_gpu.py) and the GPU benchmark, run on the CPU:
CPU operator events stand in for kernels on both sides, so dynascope's device time per layer, through
its join, meets an independent reference, torch.profiler with a range around each module of the eager
model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path[:0] = [str(BENCHMARKS), str(BENCHMARKS / "gpu_validation")]  # bench_gpu.py, validate_gpu.py

import bench_gpu  # noqa: E402
import validate_gpu  # noqa: E402


def shares(by_layer: dict[str, float]) -> dict[str, float]:
    total = sum(by_layer.values())
    return {layer: us / total for layer, us in by_layer.items()}


@pytest.fixture
def one_thread():
    """Single-threaded ops: with two test workers on two cores, OpenMP's spinning threads make the small
    ops take as long as the big ones."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_device_time_per_layer_meets_the_eager_reference(tmp_path, one_thread):
    """The layer names and where most of the time goes agree; how closely the times agree is for the
    validation script on a quiet machine to say (times on a loaded CI machine are not a test's to check)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1))
    batches = [(torch.randn(256, 1024),) for _ in range(4)]

    class WithLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = model

        def forward(self, x):
            return self.net(x).square().mean()

    net = WithLoss()
    theirs, _ = validate_gpu.reference_by_layer(net, batches, "cpu")
    ours, coverage = validate_gpu.dynascope_by_layer(validate_gpu.traced(net, batches, "cpu", "aot_eager", str(tmp_path)))
    assert coverage > 0.95  # every aten op of the steps ran inside a traced op, but .backward()'s seed
    assert {"net.0", "net.1", "net.2", "(root)"} <= set(ours) & set(theirs)  # named alike on both sides
    for side in (ours, theirs):  # the wide Linear's matmuls, forward and backward, are most of the time
        top = max(side, key=side.__getitem__)
        assert top == "net.0" and shares(side)[top] > 0.5, (ours, theirs)
    rows = {r["name"]: r for r in validate_gpu.compare(ours, theirs, steps=len(batches))}
    assert rows["net.0"]["checked"] and rows["net.0"]["dynascope_us"] > 0 and rows["net.0"]["profiler_us"] > 0


@pytest.mark.slow
def test_the_validation_and_the_benchmark_run_end_to_end_on_cpu(tmp_path):
    out = tmp_path / "validate.json"
    assert validate_gpu.main(["--device", "cpu", "--model", "gpt2", "--steps", "2", "--out", str(out)]) == 0
    parts = {(p["backend"], p["by"]): p for p in json.loads(out.read_text())["parts"]}
    assert set(parts) == {("aot_eager", "layer"), ("inductor", "kernel")}
    layers = {r["name"] for r in parts["aot_eager", "layer"]["rows"] if r["checked"]}
    assert {"head", "blocks.0.mlp.fc", "blocks.3.attn.qkv"} <= layers
    assert parts["aot_eager", "layer"]["coverage"] > 0.95
    bench = tmp_path / "bench.json"
    assert bench_gpu.main(["--device", "cpu", "--quick", "--out", str(bench)]) == 0
    rows = json.loads(bench.read_text())["rows"]
    hows = ("untraced", "traced", "traced, device time off", "torch.profiler")  # no CUDA events on the CPU
    assert {(r["backend"], r["how"]) for r in rows} == {(b, h) for b in ("aot_eager", "inductor") for h in hows}
    traced = next(r for r in rows if (r["backend"], r["how"]) == ("aot_eager", "traced"))
    assert traced["kernel_coverage"] > 0
