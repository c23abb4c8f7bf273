"""nn.Module explanations and why_recompile."""

import pytest
import torch
from support.explain_helpers import MLP, assert_backend, scale, toy_example

from dynascope.explain import observe
from dynascope.explain.api import NotCompiledError, explain, why_recompile


def test_module_with_several_layers_all_spellings():
    torch.manual_seed(0)
    model = MLP()
    with observe():
        cm = torch.compile(model, backend="aot_eager")
        cm(torch.randn(2, 8))
    via = [explain(cm), explain(model), explain(model.forward), explain(MLP.forward)]
    assert {e.cache_entries[0].compile_id for e in via} == {"0/0"}
    expl = via[0]
    assert expl.function.name == "forward" and expl.function.qualname == "MLP.forward"
    (entry,) = expl.cache_entries
    assert_backend(expl, entry, "aot_eager")
    assert entry.resume_functions == []
    (sg,) = entry.subgraphs
    # 3 linear + 2 relu + layer_norm + tanh
    assert sg.op_count == 7
    assert sg.fx_code.count("torch._C._nn.linear") == 3 and "layer_norm" in sg.fx_code
    subjects = {g.subject for g in entry.guards}
    assert "x" in subjects and "self" in subjects
    self_text = "\n".join(g.text for g in next(g for g in entry.guards if g.subject == "self").guards)
    assert "self.layers[0].weight: Parameter, dtype float32, shape [16, 8]" in self_text
    assert "self.norm.bias: Parameter" in self_text
    x_text = " ".join(g.text for g in next(g for g in entry.guards if g.subject == "x").guards)
    assert "shape [2, 8]" in x_text


def test_why_recompile_names_the_failing_guard_without_running():
    from torch._dynamo.utils import counters

    def f(x, n):
        return x * n

    opt = torch.compile(f, backend="eager")
    opt(torch.randn(4), 2)
    frames_before = dict(counters["frames"])
    ok = why_recompile(opt, torch.randn(4), 2)
    assert not ok.would_recompile and ok.hit == "0/0"
    assert "no recompile" in str(ok)
    bad = why_recompile(opt, torch.randn(4, dtype=torch.float64), 2)
    assert bad.would_recompile
    (e,) = bad.entries
    assert e.compile_id == "0/0" and not e.passes
    assert e.reasons == ["tensor 'x' dtype mismatch. expected Float, actual Double"]
    assert "0/0: tensor 'x' dtype mismatch" in str(bad)
    shape = why_recompile(f, torch.randn(7), n=2)
    assert shape.entries[0].reasons == ["tensor 'x' size mismatch at index 0. expected 4, actual 7"]
    const = why_recompile(opt, torch.randn(4), 5)
    assert const.entries[0].reasons == ["guard failed: n == 2 (now 5)"]
    assert const.to_dict()["entries"][0]["compile_id"] == "0/0"
    assert dict(counters["frames"]) == frames_before  # nothing was run or compiled
    assert [e.compile_id for e in explain(opt).cache_entries] == ["0/0"]


def test_why_recompile_sees_closure_variables():
    calls = []

    def g(x):
        calls.append(1)  # a side effect on a closed-over list: Dynamo guards that it is still empty
        return x + 1

    opt = torch.compile(g, backend="eager")
    opt(torch.randn(2))
    res = why_recompile(opt, torch.randn(2))
    assert res.would_recompile and res.entries[0].reasons == ["guard failed: not calls"]
    calls.clear()
    assert not why_recompile(opt, torch.randn(2)).would_recompile


def test_why_recompile_on_module_binds_self():
    model = MLP()
    cm = torch.compile(model, backend="eager")
    cm(torch.randn(2, 8))
    assert not why_recompile(cm, torch.randn(2, 8)).would_recompile
    res = why_recompile(cm, torch.randn(3, 8))
    assert res.entries[0].reasons == ["tensor 'x' size mismatch at index 0. expected 2, actual 3"]


def test_never_compiled_gives_one_clear_line():
    def never(x):
        return x + 1

    with pytest.raises(NotCompiledError) as info:
        explain(never)
    msg = str(info.value)
    assert "\n" not in msg
    assert "never" in msg and "no Dynamo cache entries" in msg and "torch.compile" in msg
    torch.compile(never, backend="eager")  # wrapped but never called: still nothing cached
    with pytest.raises(NotCompiledError):
        explain(torch.compile(never, backend="eager"))
    with pytest.raises(NotCompiledError):
        why_recompile(never, torch.randn(2))


def test_not_a_function_is_a_clear_error():
    from dynascope.errors import DynascopeError

    with pytest.raises(DynascopeError, match="cannot explain int"):
        explain(3)


def test_moved_torch_internals_still_give_the_rest(monkeypatch):
    from dynascope import _torch

    opt = torch.compile(scale, backend="eager")
    opt(torch.randn(4), 2)

    def gone(entry):
        raise _torch.moved("GuardManager.get_leaf_guards", AttributeError("no such attribute"))

    monkeypatch.setattr(_torch, "guard_tree", gone)
    expl = explain(opt)
    moved_notes = [n for n in expl.notes if "not available on torch" not in n]  # 2.5.1 also notes a missing feature
    assert len(moved_notes) == 1
    note = moved_notes[0]
    assert "GuardManager.get_leaf_guards" in note and torch.__version__ in note
    # guards still shown, from torch's flat guard text
    x_group = next(g for g in expl.cache_entries[0].guards if g.subject == "x")
    assert any("dtype float32" in g.text for g in x_group.guards)
    assert expl.cache_entries[0].subgraphs[0].op_count == 1
    assert f"note: {note}" in str(expl)


def test_decompiler_failure_falls_back_to_dis(monkeypatch):
    import dynascope.explain.code as code_mod

    def boom(code):
        raise RuntimeError("cannot")

    import sys
    import types

    fake = types.ModuleType("dynascope.decompiler")
    fake.decompile_or_dis = boom
    monkeypatch.setitem(sys.modules, "dynascope.decompiler", fake)
    opt = torch.compile(toy_example, backend="eager")
    opt(torch.randn(10), torch.randn(10))
    view = explain(opt).cache_entries[0].code
    assert view.decompiled is False
    assert "decompiler failed (RuntimeError: cannot)" in view.source
    assert "LOAD_GLOBAL" in view.source
    assert code_mod.decompile_code(toy_example.__code__)[1] is False


def test_method_decorated_with_torch_compile():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        @torch.compile(backend="eager")
        def forward(self, x):
            return self.lin(x).relu()

    net = Net()
    net(torch.randn(2, 3))
    for spelling in (net, net.forward, Net.forward):
        (entry,) = explain(spelling).cache_entries
        assert entry.subgraphs[0].op_count == 2
    assert not why_recompile(net, torch.randn(2, 3)).would_recompile
    assert why_recompile(net.forward, torch.randn(4, 3)).would_recompile


def test_cache_entry_list_moved_is_named_and_report_still_produced(monkeypatch):
    from dynascope.errors import TorchVersionError

    with observe() as obs:
        opt = torch.compile(scale, backend="eager")
        opt(torch.randn(4), 2)
    monkeypatch.delattr(torch._dynamo.eval_frame, "_debug_get_cache_entry_list")
    with pytest.raises(TorchVersionError) as info:
        explain(opt)
    msg = str(info.value)
    assert "_debug_get_cache_entry_list" in msg and torch.__version__ in msg and "\n" not in msg
    report = obs.report()
    assert report.explanations == []
    assert any("_debug_get_cache_entry_list" in n for n in report.notes)
    assert [ct.compile_id for ct in report.compile_times] == ["0/0"]  # the rest is still there
    assert "note: torch" in str(report)


def test_torch_nn_module_compiled_directly_goes_through_wrap_inline():
    seq = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    cs = torch.compile(seq, backend="eager")
    cs(torch.randn(2, 4))
    expl = explain(cs)
    (entry,) = expl.cache_entries
    assert expl.function.qualname == "wrap_inline.<locals>.inner"
    assert any("wrap_inline" in n and "`fn` is your module" in n for n in expl.notes)
    subjects = [g.subject for g in entry.guards]
    assert "fn" in subjects and "args" in subjects
    assert entry.subgraphs[0].op_count == 2
    assert not why_recompile(cs, torch.randn(2, 4)).would_recompile
    assert why_recompile(cs, torch.randn(2, 4, dtype=torch.float64)).entries[0].reasons == [
        "tensor 'args[0]' dtype mismatch. expected Float, actual Double"]
