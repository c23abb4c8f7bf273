"""When tracing cannot instrument a graph (a torch internal is missing), the graph still runs untraced:
correct results, one warning line, and a record in the trace of which graph ran untraced and why."""

import pytest
import torch
from support.tracecheck import check, load, op_events

import dynascope
from dynascope import _torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 8)
        self.fc2 = torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def _missing(piece):
    def accessor(*args, **kwargs):
        raise _torch.moved(piece)

    return accessor


def _train_step(model, x):
    out = model(x)
    out.sum().backward()
    return out, [p.grad.clone() for p in model.parameters()]


def _run_traced(tmp_path, backend, x, train=True):
    torch.manual_seed(0)
    model = Block()
    reference = Block()
    reference.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend=backend)
    with dynascope.session(str(tmp_path / "t.pfw")) as session:
        got = _train_step(compiled, x) if train else (compiled(x), [])
    expected = _train_step(reference, x) if train else (reference(x), [])
    return got, expected, check(load(session.path))


def _assert_same(got, expected):
    torch.testing.assert_close(got[0], expected[0])
    for g, e in zip(got[1], expected[1], strict=True):
        torch.testing.assert_close(g, e)


def _untraced_records(index):
    return [e for e in op_events(index, "dynascope") if e["args"].get("kind") == "untraced"]


def test_missing_boxed_codegen_runs_forward_and_backward_untraced(tmp_path, monkeypatch, capfd):
    monkeypatch.setattr(_torch, "boxed_codegen", _missing("torch.fx.graph._BoxedCodeGen (test 1)"))
    got, expected, index = _run_traced(tmp_path, dynascope.backend(), torch.randn(4, 8))
    _assert_same(got, expected)
    records = _untraced_records(index)
    assert {r["args"]["phase"] for r in records} == {"forward", "backward"}
    for record in records:
        args = record["args"]
        assert args["compile_id"] == "0/0" and args["runs_with"] == "aot_eager"
        assert args["graph"].startswith("__compiled_fn_") and "_BoxedCodeGen (test 1)" in args["reason"]
    assert op_events(index) == []  # no op events from graphs that ran untraced
    warnings = [ln for ln in capfd.readouterr().err.splitlines() if "runs untraced" in ln]
    assert len(warnings) == 1  # once, though two graphs fell back for the same reason
    assert f"torch {torch.__version__} has no torch.fx.graph._BoxedCodeGen (test 1)" in warnings[0]
    assert "compile 0/0" in warnings[0]


def test_missing_aot_autograd_falls_back_to_the_inner_backend(tmp_path, monkeypatch, capfd):
    monkeypatch.setattr(_torch, "aot_autograd", _missing("torch._dynamo.backends.common.aot_autograd (test 2)"))
    got, expected, index = _run_traced(tmp_path, dynascope.backend(), torch.randn(4, 8))
    _assert_same(got, expected)
    (record,) = _untraced_records(index)
    assert record["args"]["phase"] == "graph" and record["args"]["runs_with"] == "aot_eager"
    assert "aot_autograd (test 2)" in record["args"]["reason"]
    (warning,) = [ln for ln in capfd.readouterr().err.splitlines() if "runs untraced" in ln]
    assert "aot_autograd (test 2)" in warning and "BackendCompilerFailed" not in warning


def test_failing_instrumentation_of_a_dynamo_graph_leaves_it_runnable(tmp_path, monkeypatch, capfd):
    from dynascope.capture import instrument as instrument_module

    monkeypatch.setattr(instrument_module, "_recompile", _fail_after(instrument_module._recompile))
    x = torch.randn(4, 8)
    got, expected, index = _run_traced(tmp_path, dynascope.backend(autograd=False), x, train=False)
    _assert_same(got, expected)
    (record,) = _untraced_records(index)
    assert record["args"]["phase"] == "graph" and record["args"]["runs_with"] == "eager"
    assert "RuntimeError: recompile failed (test 3)" in record["args"]["reason"]
    assert any("runs untraced with eager" in ln for ln in capfd.readouterr().err.splitlines())


def _fail_after(real):
    """A recompile that fails once, after generating the instrumented code, as a torch FX change might."""
    calls = []

    def recompile(gm):
        calls.append(1)
        if len(calls) == 1:
            real(gm)
            raise RuntimeError("recompile failed (test 3)")
        real(gm)

    return recompile


def test_report_says_how_many_graphs_ran_untraced_and_why(tmp_path, monkeypatch):
    from dynascope.render._analysis import summarize_paths
    from dynascope.render.terminal import short_text, summary_text

    monkeypatch.setattr(_torch, "boxed_codegen", _missing("torch.fx.graph._BoxedCodeGen (test 4)"))
    _run_traced(tmp_path, dynascope.backend(), torch.randn(4, 8))
    summary = summarize_paths([str(tmp_path)])
    (warning,) = [w for w in summary.meta["warnings"] if "untraced" in w]
    assert warning.startswith("1 graph ran untraced, so its ops and run time are not in these tables (torch ")
    assert "_BoxedCodeGen (test 4)" in warning  # forward and backward of one Dynamo graph: one graph
    assert f"warning: {warning}" in summary_text(summary, width=400).splitlines()  # dynascope report
    assert f"warning: {warning}" in short_text(summary, width=400).splitlines()  # the end of dynascope run


@pytest.mark.slow
def test_inductor_graphs_run_untraced_when_the_wrapper_cannot_be_instrumented(tmp_path, monkeypatch, capfd):
    monkeypatch.setattr(_torch, "wrapper_call", _missing("the generated wrapper's call (test 5)"))
    got, expected, index = _run_traced(tmp_path, dynascope.backend(inner="inductor"), torch.randn(4, 8))
    _assert_same(got, expected)
    records = _untraced_records(index)
    assert {r["args"]["phase"] for r in records} == {"forward", "backward"}
    assert all(r["args"]["runs_with"] == "inductor" and "(test 5)" in r["args"]["reason"] for r in records)
    assert op_events(index) == [] and op_events(index, "dynamo.graph") == []
    assert any("runs untraced with inductor" in ln for ln in capfd.readouterr().err.splitlines())


@pytest.mark.slow
def test_inductor_cpp_wrapper_graphs_run_untraced_with_their_reason(tmp_path, capfd):
    backend = dynascope.backend(inner="inductor")
    compiled = torch.compile(Block(), backend=backend, options={"cpp_wrapper": True})
    x = torch.randn(4, 8)
    with dynascope.session(str(tmp_path / "t.pfw")) as session:
        compiled(x)
    index = check(load(session.path))
    (record,) = _untraced_records(index)
    assert record["args"]["runs_with"] == "inductor" and "cpp_wrapper=True" in record["args"]["reason"]
    assert op_events(index) == []
    assert any("calls its kernels from C++" in ln for ln in capfd.readouterr().err.splitlines())
