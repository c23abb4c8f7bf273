"""The tracing backend in-process: what is traced, attribution, options, and bad input."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support.tracecheck import attrs, check, load, op_events

import dynascope
from dynascope.errors import ConfigError, DynascopeError, SessionError, TorchVersionError


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 8)
        self.act = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def trace(tmp_path, run, **session_options):
    with dynascope.session(str(tmp_path / "t.pfw.gz"), **session_options) as session:
        run()
    return check(load(session.path)), session


def test_autograd_false_traces_the_dynamo_graph_ops(tmp_path):
    model = torch.compile(Block(), backend=dynascope.backend(autograd=False))
    index, _ = trace(tmp_path, lambda: model(torch.randn(4, 8)))
    ops = op_events(index)
    assert [e["name"] for e in ops] == ["function.linear", "function.relu", "function.linear"]
    fields = [attrs(index, e) for e in ops]
    assert [f["layer"] for f in fields] == ["fc1", "act", "fc2"]
    assert {f["phase"] for f in fields} == {"inference"} and fields[0]["backend"] == "eager"
    assert fields[0]["file"] == "test_backend.py" and "self.fc2(self.act(self.fc1(x)))" in fields[0]["code"]
    graph = op_events(index, "dynamo.graph")[0]
    assert re.fullmatch(r"__compiled_fn_\d+\.inference", graph["name"])  # numbered process-wide
    assert all(op["args"]["p_idx"] == graph["id"] and op["args"]["level"] == graph["args"]["level"] + 1 for op in ops)


def test_autograd_phases_and_grad_mode(tmp_path):
    model = torch.compile(Block(), backend=dynascope.backend())

    def run():
        model(torch.randn(4, 8)).sum().backward()
        with torch.no_grad():
            model(torch.randn(4, 8))

    index, _ = trace(tmp_path, run)
    by_phase = {}
    for event in op_events(index):
        by_phase.setdefault(attrs(index, event)["phase"], []).append(event)
    assert set(by_phase) == {"forward", "backward", "inference"}
    assert {e["args"]["grad_enabled"] for e in by_phase["forward"]} == {1}
    assert {e["args"]["grad_enabled"] for e in by_phase["inference"] + by_phase["backward"]} == {0}
    assert "function.threshold_backward.default" in {e["name"] for e in by_phase["backward"]}
    assert {attrs(index, e)["layer"] for e in by_phase["backward"]} >= {"fc1", "fc2"}
    assert {attrs(index, e)["compile_id"] for e in by_phase["forward"]} == {"0/0"}
    assert {attrs(index, e)["compile_id"] for e in by_phase["inference"]} == {"0/1"}  # grad mode change recompiles


def test_compile_phases_are_events_in_the_same_file(tmp_path):
    model = torch.compile(Block(), backend=dynascope.backend())
    index, _ = trace(tmp_path, lambda: model(torch.randn(4, 8)))
    compile_events = {e["name"]: e for e in op_events(index, "dynamo.compile")}
    assert {"entire_frame_compile", "backend_compile"} <= set(compile_events)
    assert compile_events["entire_frame_compile"]["args"]["compile_id"] == "0/0"
    first_call = op_events(index, "dynamo.graph")[0]
    whole = compile_events["entire_frame_compile"]
    assert whole["ts"] + whole["dur"] <= first_call["ts"]


def test_regions_nest_op_events(tmp_path):
    model = torch.compile(Block(), backend=dynascope.backend())

    def run():
        for epoch in range(2):
            with dynascope.region("epoch", epoch=epoch):
                for step in range(2):
                    with dynascope.region("step", step=step):
                        model(torch.randn(4, 8)).sum().backward()

    index, _ = trace(tmp_path, run)
    by_id = {e["id"]: e for e in index["events"]}
    steps = [e for e in index["events"] if e["name"] == "step"]
    assert len(steps) == 4 and all(by_id[s["args"]["p_idx"]]["name"] == "epoch" for s in steps)
    for graph in op_events(index, "dynamo.graph"):
        parent = by_id[graph["args"]["p_idx"]]
        if graph["name"].endswith(".backward"):  # inside the automatic backward event, itself in the step
            assert parent["name"] == "backward"
            parent = by_id[parent["args"]["p_idx"]]
        assert parent["name"] == "step"


def test_decorator_form(tmp_path):
    @dynascope.compile(name="fn", step=3, autograd=False)
    def double_relu(x):
        return torch.relu(x) * 2

    index, _ = trace(tmp_path, lambda: double_relu(torch.randn(5)))
    fields = attrs(index, op_events(index)[0])
    assert fields["tracer"] == "fn" and fields["step"] == 3


def test_shapes_only_on_request(tmp_path):
    model = torch.compile(Block(), backend=dynascope.backend(autograd=False))
    index, _ = trace(tmp_path, lambda: model(torch.randn(4, 8)), record_shapes=True)
    fields = attrs(index, op_events(index)[0])
    assert fields["shapes"].startswith("[[4,8]") and "float32" in fields["dtypes"]
    torch._dynamo.reset()
    index, _ = trace(tmp_path, lambda: model(torch.randn(4, 8)))
    assert "shapes" not in attrs(index, op_events(index)[0])


def test_inline_args_put_attribution_in_every_event(tmp_path):
    model = torch.compile(Block(), backend=dynascope.backend(autograd=False))
    index, _ = trace(tmp_path, lambda: model(torch.randn(4, 8)), inline_args=True)
    assert index["ops"] == {} and index["graphs"] == {}
    assert op_events(index)[0]["args"]["layer"] == "fc1"


def test_uncompressed_when_asked(tmp_path):
    model = torch.compile(Block(), backend=dynascope.backend(autograd=False))
    with dynascope.session(str(tmp_path / "plain.pfw")) as session:
        model(torch.randn(4, 8))
    assert session.path.endswith(f"plain-{os.getpid()}.pfw")
    assert Path(session.path).read_text().startswith("[\n")


def test_disabled_backend_leaves_the_graph_untouched(tmp_path):
    seen = {}

    def spy(gm, example_inputs):
        compiled = dynascope.backend(enable=False, autograd=False)(gm, example_inputs)
        seen["code"] = gm.code
        return compiled

    torch.compile(Block(), backend=spy)(torch.randn(4, 8))
    assert "_dsc_" not in seen["code"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"epoch": "1"}, "epoch='1' must be a whole number"),
        ({"name": 3}, "name=3 must be a string"),
        ({"image_size": "big"}, "image_size='big'"),
        ({"enable": "yes"}, "enable='yes' must be True or False"),
        ({"inner": "tvm"}, "inner backend 'tvm'"),
        ({"inner": "eager", "autograd": True}, "autograd=False"),
    ],
)
def test_bad_backend_parameters_say_what_is_wrong(kwargs, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        dynascope.backend(**kwargs)


def test_unwritable_directory(tmp_path):
    blocked = tmp_path / "ro"
    blocked.mkdir()
    blocked.chmod(0o500)
    if os.access(blocked, os.W_OK):  # root ignores permissions: use a path under a file instead
        target = str(tmp_path / "afile")
        open(target, "w").close()
        path = os.path.join(target, "t.pfw.gz")
    else:
        path = str(blocked / "t.pfw.gz")
    with pytest.raises(SessionError, match="cannot write the trace file"):
        dynascope.session(path)
    assert dynascope.current_session() is None


def test_bad_environment_value(monkeypatch):
    monkeypatch.setenv("DFTRACER_TRACE_COMPRESSION", "maybe")
    with pytest.raises(ConfigError, match="DFTRACER_TRACE_COMPRESSION"):
        dynascope.session("x.pfw.gz")


def test_old_torch_is_refused_in_one_line(monkeypatch):
    from dynascope import _torch

    monkeypatch.setattr(torch, "__version__", "2.4.0")
    with pytest.raises(TorchVersionError, match=re.escape("needs PyTorch >= 2.5.1, found 2.4.0")):
        _torch.require_torch()


def test_missing_torch_is_one_line_from_the_cli(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("print('hi')\n")
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "torch.py").write_text("raise ImportError('No module named torch')\n")
    env = {**os.environ, "PYTHONPATH": str(blocker)}
    result = subprocess.run([sys.executable, "-m", "dynascope.cli", "demo"], capture_output=True, check=False, text=True, env=env)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "torch is not installed" in result.stderr


def test_errors_share_one_base():
    assert issubclass(ConfigError, DynascopeError) and issubclass(SessionError, DynascopeError)


def test_synchronize_before_every_reading_when_asked():
    from dynascope.capture.instrument import instrument, uses_cuda

    calls = []
    seen = {}

    def spy(gm, example_inputs):
        assert not uses_cuda(gm)
        instrument(gm, 10_000, synchronize=lambda: calls.append(1))
        seen["ops"] = sum(1 for n in gm.graph.nodes if n.op.startswith("call"))
        return gm.forward

    fn = torch.compile(Block(), backend=spy)
    fn(torch.randn(4, 8))
    fn(torch.randn(4, 8))
    assert len(calls) == 2 * (seen["ops"] + 1)  # start reading plus one per op, per call


def test_cuda_sync_leaves_cpu_graphs_alone(tmp_path):
    seen = {}

    def spy(gm, example_inputs):
        compiled = dynascope.backend(autograd=False, cuda_sync=True)(gm, example_inputs)
        seen["code"] = gm.code
        return compiled

    with dynascope.session(str(tmp_path / "t.pfw.gz")):
        torch.compile(Block(), backend=spy)(torch.randn(4, 8))
    assert "_dsc_r(_dsc_c())" in seen["code"] and "_dsc_sync" not in seen["code"]


def test_an_explicit_session_replaces_the_default_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = torch.compile(Block(), backend=dynascope.backend(autograd=False))
    model(torch.randn(4, 8))  # no session: a default one starts
    default = dynascope.current_session()
    assert default is not None and default.implicit
    with dynascope.session(str(tmp_path / "mine.pfw.gz")) as mine:
        model(torch.randn(4, 8))
    assert default.closed and check(load(default.path))  # complete, not lost
    assert op_events(check(load(mine.path)))


def test_layer_paths_read_the_same_in_every_torch_spelling():
    from dynascope.capture.attribution import clean_module_path

    assert clean_module_path("L['self']._modules['layers']._modules['0']") == "layers.0"  # torch 2.5.1
    assert clean_module_path("L['self'].layers.0") == "layers.0"  # torch 2.13
    assert clean_module_path("L['self'].blocks[0]._modules['fc']") == "blocks.0.fc"


def test_compile_passes_mode_to_torch_compile_and_aot_eager_says_it_does_not_apply(tmp_path, capfd):
    @dynascope.compile(mode="reduce-overhead", fullgraph=True)
    def double_relu(x):
        return torch.relu(x) * 2

    x = torch.randn(5)
    index, _ = trace(tmp_path, lambda: double_relu(x))
    assert torch.equal(double_relu(x), torch.relu(x) * 2)
    assert {attrs(index, e)["phase"] for e in op_events(index)} == {"inference"}  # traced under aot_eager
    err = capfd.readouterr().err
    assert "mode='reduce-overhead'" in err and "do not apply" in err


@pytest.mark.slow
def test_compile_mode_reaches_inductor_on_cpu(tmp_path, monkeypatch):
    from dynascope import _torch

    patches = []
    compilers = _torch.inductor_compilers

    def spying_compilers():
        compile_fx, compile_fx_inner = compilers()

        def compile_with(gm, example_inputs, **kwargs):
            patches.append(kwargs.get("config_patches"))
            return compile_fx(gm, example_inputs, **kwargs)

        return compile_with, compile_fx_inner

    monkeypatch.setattr(_torch, "inductor_compilers", spying_compilers)

    @dynascope.compile(mode="max-autotune-no-cudagraphs", inner="inductor")
    def poly(x):
        return x.sin() * 2 + 1

    x = torch.randn(16)
    index, _ = trace(tmp_path, lambda: poly(x))
    assert torch.allclose(poly(x), x.sin() * 2 + 1)
    mode = _torch.inductor_mode_options("max-autotune-no-cudagraphs")  # {"max_autotune": True, ...} on 2.13
    assert patches == [{**mode, **_torch.inductor_provenance_patch()}]  # as torch.compile gives inductor, and provenance
    assert attrs(index, op_events(index)[0])["backend"] == "inductor"


def test_compile_unknown_mode_is_one_clear_error():
    with pytest.raises(ConfigError, match="mode 'fastest' is not one of"):
        dynascope.compile(mode="fastest")(lambda x: x)
