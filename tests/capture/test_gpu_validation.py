"""The GPU validation (benchmarks/validate_gpu.py) and the GPU benchmark, run on the CPU: CPU operator
events stand in for kernels on both sides, so dynascope's device time per layer, through its join,
meets an independent reference, torch.profiler with a range around each module of the eager model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_gpu  # noqa: E402
import validate_gpu  # noqa: E402


def shares(by_layer: dict[str, float]) -> dict[str, float]:
    total = sum(by_layer.values())
    return {layer: us / total for layer, us in by_layer.items()}


def test_device_time_per_layer_meets_the_eager_reference(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512))
    batches = [(torch.randn(64, 512),) for _ in range(4)]

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
    big = {layer for layer, share in shares(theirs).items() if share > 0.1}
    assert big == {"net.0", "net.2"}  # the two Linear layers: forward and backward matmuls
    for layer in big:  # shares, not times: steadier on a loaded machine
        assert shares(ours)[layer] == pytest.approx(shares(theirs)[layer], abs=0.15), (ours, theirs)
    rows = validate_gpu.compare(ours, theirs, steps=len(batches))
    assert {r["name"] for r in rows if r["checked"]} >= big


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
    assert {(r["backend"], r["how"]) for r in rows} == {(b, h) for b in ("aot_eager", "inductor")
                                                         for h in ("untraced", "traced", "torch.profiler")}  # fmt: skip
