"""Kernel-level tracing under inductor: real inductor compiles on CPU, forward and backward."""

import inspect
import types

import polars as pl
import pytest
import torch
from support.tracecheck import attrs, check, load, op_events

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


@pytest.fixture(scope="module")
def tail_run(tmp_path_factory):
    """One traced run of Tail under inductor (two training steps, caches on), shared by the tests that read
    its trace, and what untraced inductor computes for the same input."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    tmp_path = tmp_path_factory.mktemp("tail")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor-cache"))
        with inductor_config.patch(fx_graph_cache=True), functorch_config.patch(enable_autograd_cache=True):
            torch.manual_seed(0)
            eager = Tail()
            model = torch.compile(eager, backend=dynascope.backend(inner="inductor"))
            x = torch.randn(4, 8)
            index, outputs = traced_steps(tmp_path, model, x)
            plain = Tail()
            plain.load_state_dict(eager.state_dict())
            expected = torch.compile(plain, backend="inductor")(x)
    (path,) = tmp_path.glob("t*.pfw.gz")
    return types.SimpleNamespace(index=index, outputs=outputs, expected=expected, path=str(path))


def test_forward_and_backward_kernels_with_layers_and_lines(tail_run):
    index = tail_run.index
    assert all(torch.equal(out, tail_run.expected.detach()) for out in tail_run.outputs)  # as untraced inductor

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


def test_each_kernel_event_names_the_code_it_runs(tail_run):
    index = tail_run.index
    forward = by_phase(index)["forward"][: len(FORWARD)]
    codes = [index["sources"][attrs(index, e)["kernel_code"]] for e in forward]
    relu, tail = codes[1], codes[3]  # generated kernels: their C++ source
    assert all('extern "C"' in code and "kernel(" in code for code in (relu, tail))
    assert "exp" in tail and "exp" not in relu  # the tail fuses the sigmoid, the ReLU kernel has none
    assert codes[0].startswith("extern_kernels.addmm(") and "out=" in codes[0]  # extern: its wrapper line
    backward = by_phase(index)["backward"]
    assert all(attrs(index, e)["kernel_code"] in index["sources"] for e in backward)


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


def test_kernel_table_layer_table_and_both_readers_agree(tail_run):
    from dynascope.analyze.pipeline import summarize, summarize_files
    from dynascope.analyze.read.reader import read_trace_with_info

    summary = summarize_files([tail_run.path])
    kernels = summary.by_kernel
    forward = kernels.filter(pl.col("phase") == "forward")
    assert sorted(forward.get_column("name").to_list()) == sorted(name for name, *_ in FORWARD)
    assert set(forward.get_column("count").to_list()) == {2}  # two steps
    assert kernels.get_column("count").sum() == summary.meta["ops"]  # every op event is a kernel
    durations = {}  # each call site's total from the raw events
    for event in op_events(tail_run.index):
        key = (attrs(tail_run.index, event)["phase"], attrs(tail_run.index, event)["kernel_code"])
        durations[key] = durations.get(key, 0) + event["dur"]
    assert {(r["phase"], r["kernel_code"]): r["total_us"] for r in kernels.iter_rows(named=True)} == durations
    assert abs(kernels.get_column("share").sum() - 1) < 1e-9
    assert set(summary.sources) == set(kernels.get_column("kernel_code"))
    if PROVENANCE:
        tail = forward.filter(pl.col("name") == "cpp_fused_add_mul_sigmoid_1").row(0, named=True)
        assert set(tail["fused"].split(", ")) == {"sigmoid", "mul", "add"}
        assert tail["lines"] == f"test_kernels.py:{inspect.getsourcelines(Tail.forward)[1] + 2}"
        addmm = forward.filter(pl.col("name") == "extern_kernels.addmm").sort("layer")
        assert addmm.get_column("layer").to_list() == ["fc1", "fc2"] and addmm.get_column("fused").to_list() == ["addmm"] * 2
        layers = {r["layer"]: r for r in summary.by_layer.iter_rows(named=True)}
        assert {"fc1", "act", "fc2"} <= set(layers)
        assert all(layers[name]["forward_us"] > 0 and layers[name]["backward_us"] > 0 for name in ("fc1", "act", "fc2"))
    frame, info = read_trace_with_info([tail_run.path])
    from_rows = summarize(frame, info=info)
    assert from_rows.by_kernel.equals(kernels) and from_rows.sources == summary.sources


def test_report_shows_kernels_in_the_terminal_json_and_html(tail_run, tmp_path, capsys):
    import json

    import markupsafe

    from dynascope.cli import main as cli_main

    assert cli_main(["report", tail_run.path]) == 0
    out = capsys.readouterr().out
    assert "Kernels (inductor)" in out and "cpp_fused_add_mul_sigmoid_1" in out
    assert "\nOps" not in out  # every op event is a kernel: the per-kernel table replaces the per-op one
    assert cli_main(["report", tail_run.path, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {row["kernel_code"] for row in data["by_kernel"]} == set(data["kernel_sources"])
    assert cli_main(["report", tail_run.path, "--html", str(tmp_path / "r.html"), "-q"]) == 0
    page = (tmp_path / "r.html").read_text()
    slowest = data["by_kernel"][0]
    assert 'id="kernel-code"' in page and 'href="#kernel-0"' in page
    details = page[page.index('<details id="kernel-0">'):]
    details = details[: details.index("</details>")]
    assert slowest["name"] in details and str(markupsafe.escape(data["kernel_sources"][slowest["kernel_code"]])) in details
    relu = next(r for r in data["by_kernel"] if r["name"] == "cpp_fused_relu_0" and r["phase"] == "forward")
    assert str(markupsafe.escape(data["kernel_sources"][relu["kernel_code"]])) in page  # C++ source, escaped


def test_perfetto_export_nests_kernels_under_graph_calls(tail_run, tmp_path):
    import json

    from dynascope.render.chrome import convert

    convert([tail_run.path], tmp_path / "t.json")
    slices = [e for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"] if e["ph"] == "X"]
    graphs = [e for e in slices if e["cat"].startswith("dynamo.graph")]
    kernels = [e for e in slices if e["cat"].split(",")[0] == "dynamo"]
    assert len(graphs) == 4 and len(kernels) == len(op_events(tail_run.index))
    for kernel in kernels:
        parents = [g for g in graphs if (g["pid"], g["tid"]) == (kernel["pid"], kernel["tid"])
                   and g["ts"] <= kernel["ts"] and kernel["ts"] + kernel["dur"] <= g["ts"] + g["dur"]]  # fmt: skip
        assert len(parents) == 1 and parents[0]["cat"].split(",")[1] == kernel["cat"].split(",")[1]  # same phase
        assert kernel["args"]["kernel_kind"] in ("generated", "extern", "fallback") and "kernel_code" not in kernel["args"]
    if PROVENANCE:
        addmm = next(k for k in kernels if k["name"] == "extern_kernels.addmm")
        assert addmm["args"]["layer"] == "fc1" and addmm["args"]["source"].startswith("test_kernels.py:")


WRAPPER = '''
cpp_fused_0 = async_compile.cpp_pybinding(['const float*', 'float*'], r"""extern "C" void kernel(const float* in_ptr0, float* out_ptr0) {}""")
cpp_fused_relu_1 = async_compile.cpp_pybinding(['float*'], r"""extern "C" void kernel(float* in_out_ptr0) {}""")

def call(args):
    primals_1, primals_2, primals_3 = args
    s77 = primals_3
    buf0 = empty_strided_cpu((16, 8, 3, 3), (72, 1, 24, 8), torch.float32)
    cpp_fused_0(primals_2, buf0)
    buf1 = extern_kernels.convolution(primals_3, primals_1, None, stride=(1, 1))
    cpp_fused_relu_1(buf1, s77)
    buf7 = empty_strided_cpu((4, 4), (4, 1), torch.float32)
    buf3 = extern_kernels.convolution(buf1, buf0, None, stride=(1, 1))
    aten.scatter_reduce_.two(buf7, 1, buf3, buf3, reduce='sum')
    buf4 = empty_strided_cpu((4, 4), (4, 1), torch.float32)
    extern_kernels.mm(buf7, primals_1, out=buf4)
    return (buf4,)
'''


def test_kernels_without_an_op_of_their_own_count_under_the_layer_that_reads_their_output():
    from dynascope.capture import kernels

    wrapper = kernels.Wrapper.parse(WRAPPER)
    assert [c.name for c in wrapper.calls] == [
        "cpp_fused_0", "extern_kernels.convolution", "cpp_fused_relu_1", "extern_kernels.convolution",
        "aten.scatter_reduce_.two", "extern_kernels.mm",
    ]  # fmt: skip
    assert wrapper.codes[0] == 'extern "C" void kernel(const float* in_ptr0, float* out_ptr0) {}'
    assert wrapper.codes[1] == "buf1 = extern_kernels.convolution(primals_3, primals_1, None, stride=(1, 1))"
    # the weight conversion's buf0 is read by the second convolution, not the first (s77 is no buffer);
    # the in-place scatter writes buf7, which the mm reads
    assert wrapper.consumers == [3, 2, None, 4, 5, None]
    fields = [{"target": "", "lines": "", "layer": "", "module_type": "", "layers": "", "node": "primals_2"},
              {"target": "aten.convolution.default", "lines": "m.py:3", "layer": "conv1", "module_type": "Conv2d"},
              {"target": "aten.relu.default", "lines": "m.py:3", "layer": "", "module_type": ""},
              {"target": "aten.convolution.default", "lines": "m.py:4", "layer": "conv2", "module_type": "Conv2d"},
              {"target": "", "lines": "", "layer": "", "module_type": "", "layers": ""},
              {"target": "aten.mm.default", "lines": "m.py:5", "layer": "fc", "module_type": "Linear"}]  # fmt: skip
    kernels.borrow_layers(fields, wrapper.consumers)
    assert [f["layer"] for f in fields] == ["conv2", "conv1", "", "conv2", "fc", "fc"]  # the ReLU has ops of its own
    assert fields[0]["layers"] == "conv2" and fields[0]["module_type"] == "Conv2d"
