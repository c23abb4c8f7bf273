"""What compiled graphs keep for the backward, read from AOTAutograd's partition (capture/graph_memory.py): sizes
worked out by hand from the shapes, the partitioner's recomputation, the estimated peak, dynamic shapes."""

import json

import pytest
import torch
import torch._functorch.config as functorch_config
from support.explain_helpers import line_of

from dynascope.artifacts.explanation import Report
from dynascope.explain import observe

N = 64  # the batch
F32 = 4


class Stack(torch.nn.Module):
    """Linear(16, 32) -> ReLU -> Linear(32, 24) -> ReLU -> Linear(24, 8)."""

    def __init__(self):
        super().__init__()
        self.fc1, self.act1 = torch.nn.Linear(16, 32), torch.nn.ReLU()
        self.fc2, self.act2 = torch.nn.Linear(32, 24), torch.nn.ReLU()
        self.fc3 = torch.nn.Linear(24, 8)

    def forward(self, x):
        h = self.act1(self.fc1(x))
        h = self.act2(self.fc2(h))
        return self.fc3(h)


class Gated(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)

    def forward(self, x):
        h = self.fc1(x)
        return self.fc2(torch.sigmoid(h) * h)


class Planted(torch.nn.Module):
    """A big intermediate (N x 4096) in one layer, everything else small."""

    def __init__(self):
        super().__init__()
        self.small, self.big = torch.nn.Linear(16, 16), torch.nn.Linear(16, 4096)

    def forward(self, x):
        h = self.small(x)
        wide = self.big(h)
        return wide.sum(dim=1, keepdim=True) * h


def _compiled(model, backend, x, dynamic=None):
    functorch_config.enable_autograd_cache = False  # a cache hit skips the partition
    with observe() as obs:
        torch.compile(model, backend=backend, dynamic=dynamic)(x).sum().backward()
    report = obs.report()
    (graph,) = report.memory
    return report, graph


@pytest.fixture(autouse=True)
def _autograd_cache_as_it_was():
    before = functorch_config.enable_autograd_cache
    yield
    functorch_config.enable_autograd_cache = before


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_saved_activations_per_layer_are_the_bytes_worked_out_from_the_shapes(backend):
    report, graph = _compiled(Stack(), backend, torch.randn(N, 16))
    activations = {t.layer: t for t in graph.saved if t.kind == "activation"}
    # ReLU's backward needs its output, and so does the next Linear's weight gradient: one tensor each
    assert {layer: t.bytes for layer, t in activations.items()} == {"act1": N * 32 * F32, "act2": N * 24 * F32}
    assert graph.saved_bytes == N * (32 + 24) * F32
    assert [(row.layer, row.bytes) for row in graph.by_layer()] == [("act1", N * 32 * F32), ("act2", N * 24 * F32)]
    first = activations["act1"]
    assert (first.shape, first.dtype, first.op, first.module_type) == (f"[{N}, 32]", "float32", "aten.relu.default", "ReLU")
    assert first.line == line_of(Stack.forward, "h = self.act1(self.fc1(x))") and first.file == "test_memory.py"
    inputs = {t.op: t.bytes for t in graph.saved if t.kind == "input"}
    assert inputs["x"] == N * 16 * F32  # fc1's weight gradient needs the batch
    assert inputs["fc3.weight"] == 8 * 24 * F32  # act2's gradient goes through fc3's weight
    # the file and the text say the same
    again = Report.from_json(json.dumps(report.to_dict()))
    assert again.memory[0].saved_bytes == graph.saved_bytes
    text = str(report)
    assert "saves 14.3 kB in 2 activations" in text and "keeps" in text and "fc3.weight" in text


def test_inductor_recomputes_the_pointwise_op_after_the_matmul():
    _, graph = _compiled(Gated(), "inductor", torch.randn(N, 16))
    recomputed = {r.name: r for r in graph.recomputed}
    assert "sigmoid" in recomputed, graph.recomputed
    assert recomputed["sigmoid"].line == line_of(Gated.forward, "return self.fc2(torch.sigmoid(h) * h)")
    assert "sigmoid" not in {t.name for t in graph.saved}
    assert "recomputed in the backward instead of saved: sigmoid" in str(_report_of(graph))


def _report_of(graph):
    return Report(memory=[graph])


def test_the_forward_peak_names_the_planted_layer_and_its_line():
    _, graph = _compiled(Planted(), "aot_eager", torch.randn(N, 16))
    peak = graph.forward_peak
    wide = peak.largest
    assert (wide.layer, wide.op, wide.bytes) == ("big", "aten.addmm.default", N * 4096 * F32)
    assert wide.line == line_of(Planted.forward, "wide = self.big(h)")
    # reached when the sum's output joins `wide` and the small layer's output (kept for the backward)
    assert peak.at.op == "aten.sum.dim_IntList"
    assert peak.bytes == N * 4096 * F32 + N * 16 * F32 + N * F32
    # the gradient of `wide` is an expand of the sum's (a view): the backward never holds N x 4096
    assert graph.backward_peak.bytes < N * 4096 * F32


def test_dynamic_shapes_are_symbolic_and_evaluated_at_the_sizes_seen():
    x = torch.randn(N, 16)
    torch._dynamo.mark_dynamic(x, 0)
    _, graph = _compiled(Stack(), "aot_eager", x)
    assert graph.symbolic
    act1 = next(t for t in graph.saved if t.layer == "act1")
    assert act1.bytes == N * 32 * F32
    assert act1.shape.endswith(f"={N}, 32]") and act1.bytes_expr and "*" in act1.bytes_expr


def test_inductors_own_estimate_sits_beside_ours_where_it_compiles_the_graph(monkeypatch):
    inductor_memory = pytest.importorskip("torch._inductor.memory", reason="torch 2.5 has no peak-memory pass")
    assert inductor_memory  # the pass whose estimate is read (torch._inductor.config.reorder_for_peak_memory)
    monkeypatch.setattr(torch._inductor.config, "fx_graph_cache", False)  # a cache hit schedules nothing
    monkeypatch.setattr(torch._inductor.config, "reorder_for_peak_memory", True)
    _, graph = _compiled(Planted(), "inductor", torch.randn(N, 16))
    forward, backward = graph.forward_peak, graph.backward_peak
    wide = N * 4096 * F32  # `big`'s output: an extern matmul's buffer that the sum reads, so no fusion removes it
    inputs = (N * 16 + 16 * 16 + 16 + 4096 * 16 + 4096) * F32  # the batch and the parameters, all counted by inductor
    assert wide <= forward.inductor_bytes <= forward.bytes + inputs, forward
    assert backward.inductor_bytes is not None  # compiled at the first backward, joined to the same account
    assert "inductor's estimate" in str(_report_of(graph))
