"""Kernel-level tracing under inductor: real inductor compiles on CPU, forward and backward."""

import pytest
import torch
from tracecheck import attrs, check, load, op_events

import dynascope
from dynascope import _torch

PROVENANCE = bool(_torch.inductor_provenance_patch())  # torch 2.5.1 and 2.8.0 keep none: kernels by name only


class Tail(torch.nn.Module):
    """Linear -> ReLU -> Linear with a pointwise tail: inductor runs two addmm extern kernels, one
    generated ReLU kernel and one generated kernel fusing the tail (sigmoid, mul, add)."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.act = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        y = self.fc2(self.act(self.fc1(x)))
        return torch.sigmoid(y) * 2 + 1


FORWARD = [  # (kernel, kind, layer, fused ATen ops, source line)
    ("extern_kernels.addmm", "extern", "fc1", {"aten.addmm.default"}, "y = self.fc2(self.act(self.fc1(x)))"),
    ("cpp_fused_relu_0", "generated", "act", {"aten.relu.default"}, "y = self.fc2(self.act(self.fc1(x)))"),
    ("extern_kernels.addmm", "extern", "fc2", {"aten.addmm.default"}, "y = self.fc2(self.act(self.fc1(x)))"),
    ("cpp_fused_add_mul_sigmoid_1", "generated", "",
     {"aten.sigmoid.default", "aten.mul.Tensor", "aten.add.Tensor"}, "return torch.sigmoid(y) * 2 + 1"),
]  # fmt: skip


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh inductor cache directory with the FX-graph and AOTAutograd caches on."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor-cache"))
    with inductor_config.patch(fx_graph_cache=True), functorch_config.patch(enable_autograd_cache=True):
        yield tmp_path / "inductor-cache"


def traced_steps(tmp_path, model, x, steps=2, name="t"):
    with dynascope.session(str(tmp_path / f"{name}.pfw.gz")) as session:
        outputs = []
        for _ in range(steps):
            out = model(x)
            out.sum().backward()
            outputs.append(out.detach())
    return check(load(session.path)), outputs


def by_phase(index):
    phases = {}
    for event in op_events(index):
        phases.setdefault(attrs(index, event)["phase"], []).append(event)
    return phases


def check_forward_kernels(index, events):
    fields = [attrs(index, e) for e in events]
    assert [(e["name"], f["kernel_kind"]) for e, f in zip(events, fields, strict=True)] == [row[:2] for row in FORWARD]
    if not PROVENANCE:
        return
    found = [(e["name"], f["kernel_kind"], f["layer"], set(f["target"].split(",")), f["code"]) for e, f in zip(events, fields, strict=True)]
    assert found == FORWARD
    assert all(f["kind"] == "kernel" and f["backend"] == "inductor" and f["file"] == "test_kernels.py" for f in fields)
    assert fields[0]["module_type"] == "Linear" and fields[1]["module_type"] == "ReLU"


def test_forward_and_backward_kernels_with_layers_and_lines(tmp_path, cache_dir):
    torch.manual_seed(0)
    eager = Tail()
    model = torch.compile(eager, backend=dynascope.backend(inner="inductor"))
    x = torch.randn(4, 8)
    index, outputs = traced_steps(tmp_path, model, x)
    plain = Tail()
    plain.load_state_dict(eager.state_dict())
    expected = torch.compile(plain, backend="inductor")(x)
    assert all(torch.equal(out, expected.detach()) for out in outputs)  # what untraced inductor computes

    phases = by_phase(index)
    graphs = op_events(index, "dynamo.graph")
    assert [g["name"].rsplit(".", 1)[1] for g in graphs] == ["forward", "backward"] * 2
    forward = [e for e in phases["forward"] if e["args"]["p_idx"] == graphs[0]["id"]]
    check_forward_kernels(index, forward)
    assert len(phases["forward"]) == 2 * len(FORWARD)  # every call, not only the first
    backward = [e for e in phases["backward"] if e["args"]["p_idx"] == graphs[1]["id"]]
    assert [e["name"] for e in backward].count("extern_kernels.mm") == 3
    assert all(e["args"]["grad_enabled"] == 0 for e in backward)
    if PROVENANCE:
        check_backward_layers([attrs(index, e) for e in backward], backward)
    for graph in graphs:
        inside = [e for e in op_events(index) if e["args"]["p_idx"] == graph["id"]]
        assert inside and all(graph["ts"] <= e["ts"] and e["ts"] + e["dur"] <= graph["ts"] + graph["dur"] + 1 for e in inside)


def check_backward_layers(fields, backward):
    mms = [f["layer"] for e, f in zip(backward, fields, strict=True) if e["name"] == "extern_kernels.mm"]
    assert mms == ["fc2", "fc2", "fc1"]  # fc2's input and weight gradients, then fc1's weight gradient
    relu_grad = next(f for f in fields if "aten.threshold_backward.default" in f["target"] or "aten.le.Scalar" in f["target"])
    assert relu_grad["layer"] == "act" and "act" in relu_grad["layers"].split(",")
    assert all(f["file"] == "test_kernels.py" and f["line"] > 0 for f in fields)


@pytest.mark.slow
def test_warm_fx_graph_cache_run_is_traced(tmp_path, cache_dir):
    from torch._dynamo.utils import counters

    x = torch.randn(4, 8)
    traced_steps(tmp_path, torch.compile(Tail(), backend=dynascope.backend(inner="inductor")), x, steps=1, name="cold")
    torch._dynamo.reset()
    hits = counters["inductor"]["fxgraph_cache_hit"]
    index, _ = traced_steps(tmp_path, torch.compile(Tail(), backend=dynascope.backend(inner="inductor")), x, steps=1)
    assert counters["inductor"]["fxgraph_cache_hit"] >= hits + 2  # forward and backward came from the cache
    phases = by_phase(index)
    check_forward_kernels(index, phases["forward"])
    if PROVENANCE:  # the backward's kernel -> node map comes back from dynascope's record beside the cache
        check_backward_layers([attrs(index, e) for e in phases["backward"]], phases["backward"])
        assert list((cache_dir / "dynascope").glob("*.json"))


class MovedTail(Tail):
    """Tail's forward on other lines, as after an edit above it: the same graph, so a cache hit."""

    def forward(self, x):
        y = self.fc2(self.act(self.fc1(x)))
        return torch.sigmoid(y) * 2 + 1


@pytest.mark.slow
@pytest.mark.parametrize("keep_record", [True, False])
def test_a_cache_hit_reports_this_runs_source_lines(tmp_path, cache_dir, keep_record):
    import inspect
    import shutil

    from torch._dynamo.utils import counters

    x = torch.randn(4, 8)
    traced_steps(tmp_path, torch.compile(Tail(), backend=dynascope.backend(inner="inductor")), x, steps=1, name="cold")
    torch._dynamo.reset()
    if not keep_record:  # e.g. a cache written by an older dynascope: layers then come from source lines
        shutil.rmtree(cache_dir / "dynascope", ignore_errors=True)
    hits = counters["inductor"]["fxgraph_cache_hit"]
    index, _ = traced_steps(tmp_path, torch.compile(MovedTail(), backend=dynascope.backend(inner="inductor")), x, 1)
    assert counters["inductor"]["fxgraph_cache_hit"] >= hits + 2
    first = inspect.getsourcelines(MovedTail.forward)[1]
    events = op_events(index)
    if PROVENANCE:
        fields = [attrs(index, e) for e in events]
        assert {f["line"] for f in fields if f["line"]} == {first + 1, first + 2}
        assert {f["layer"] for f in fields} == {"fc1", "act", "fc2", ""}

def test_untraced_after_traced_gets_uninstrumented_code(tmp_path, cache_dir):
    torch.manual_seed(0)
    eager = Tail()
    x = torch.randn(4, 8)
    traced_steps(tmp_path, torch.compile(eager, backend=dynascope.backend(inner="inductor")), x, steps=1, name="first")
    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    misses = counters["inductor"]["fxgraph_cache_miss"]
    plain = torch.compile(eager, backend="inductor")
    index, outputs = traced_steps(tmp_path, plain, x, steps=2)
    # the provenance level is part of inductor's cache key from 2.11, so traced compiles keep entries of their
    # own; 2.10 shares them, and the untraced run still gets uninstrumented code (kernels are timed on load)
    if PROVENANCE and _torch.torch_at_least(2, 11):
        assert counters["inductor"]["fxgraph_cache_miss"] == misses + 2
    assert op_events(index) == [] and op_events(index, "dynamo.graph") == []
    assert torch.allclose(outputs[1], eager(x))


@pytest.mark.slow
def test_traced_after_untraced_with_warm_caches(tmp_path, cache_dir):
    from torch._dynamo.utils import counters

    x = torch.randn(4, 8)
    plain = torch.compile(Tail(), backend="inductor")
    plain(x).sum().backward()
    torch._dynamo.reset()
    plain = torch.compile(Tail(), backend="inductor")
    aot_hits = counters["aot_autograd"]["autograd_cache_hit"]
    plain(x).sum().backward()
    assert counters["aot_autograd"]["autograd_cache_hit"] > aot_hits  # the caches are warm for plain inductor
    torch._dynamo.reset()
    index, _ = traced_steps(tmp_path, torch.compile(Tail(), backend=dynascope.backend(inner="inductor")), x, steps=1)
    check_forward_kernels(index, by_phase(index)["forward"])
    assert by_phase(index)["backward"]


@pytest.mark.slow
def test_inference_graph_kernels(tmp_path, cache_dir):
    model = torch.compile(Tail(), backend=dynascope.backend(inner="inductor"))
    with dynascope.session(str(tmp_path / "t.pfw.gz")) as session, torch.no_grad():
        model(torch.randn(4, 8))
    index = check(load(session.path))
    events = op_events(index)
    assert {attrs(index, e)["phase"] for e in events} == {"inference"}
    assert [e["name"] for e in events] == [name for name, *_ in FORWARD]


@pytest.mark.slow
def test_drop_in_create_backend_and_dynamo_compile_trace_kernels(tmp_path, monkeypatch, cache_dir):
    from dftracer.python import dftracer, dynamo

    monkeypatch.setenv("DFTRACER_ENABLE", "1")
    logger = dftracer.initialize_log(str(tmp_path / "dft.pfw"), None, -1)
    model = Tail()
    with_backend = torch.compile(model, backend=dynamo.create_backend(name="tail", epoch=1, inner="inductor"))

    @dynamo.compile(inner="inductor")
    def decorated(x):
        return model(x)

    x = torch.randn(4, 8)
    with_backend(x).sum().backward()
    decorated(x)
    logger.finalize()
    index = check(load(logger.logfile))
    events = op_events(index)
    labelled = [e for e in events if attrs(index, e).get("tracer") == "tail"]
    assert {attrs(index, e)["phase"] for e in labelled} == {"forward", "backward"}
    check_forward_kernels(index, [e for e in labelled if attrs(index, e)["phase"] == "forward"])
    others = [e for e in events if attrs(index, e).get("tracer") == "dynamo"]
    assert [e["name"] for e in others if attrs(index, e)["phase"] == "forward"] == [name for name, *_ in FORWARD]


class ConvBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x))).mean()


@pytest.mark.slow
def test_extern_and_fallback_kernels_take_their_own_ops_layer(tmp_path, cache_dir):
    model = torch.compile(ConvBlock(), backend=dynascope.backend(inner="inductor"))
    with dynascope.session(str(tmp_path / "t.pfw.gz")) as session:
        model(torch.randn(2, 3, 8, 8)).backward()
    index = check(load(session.path))
    kernels = {(attrs(index, e)["phase"], e["name"]): attrs(index, e) for e in op_events(index)}
    conv = kernels[("forward", "extern_kernels.convolution")]
    conv_grad = kernels[("backward", "aten.convolution_backward.default")]
    assert conv["kernel_kind"] == "extern" and conv_grad["kernel_kind"] == "fallback"
    if PROVENANCE:  # the fallback also covers batch-norm backward nodes; its layer is its own op's
        assert conv["layer"] == conv_grad["layer"] == "conv" and conv_grad["module_type"] == "Conv2d"
        assert "aten.convolution_backward.default" in conv_grad["target"].split(",")
