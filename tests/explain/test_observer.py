"""Graph breaks, recompiles, compile times and cache-limit hits as the observer records them."""

import torch
from support.explain_helpers import line_of, scale, toy_example, toy_print

from dynascope.explain import observe, start_observing, stop_observing
from dynascope.explain.api import explain


def test_graph_break_from_print_deduplicated_with_location_and_excerpt(capsys):
    with observe() as obs:
        opt = torch.compile(toy_print, backend="eager")
        opt(torch.randn(10), torch.randn(10))
        opt(torch.randn(10), torch.randn(10))  # cache hit: no new break
        opt(torch.randn(10, dtype=torch.float64), torch.randn(10, dtype=torch.float64))  # recompile: breaks again
    breaks = [gb for gb in obs.graph_breaks if gb.function == "toy_print"]
    assert len(breaks) == 1
    (gb,) = breaks
    assert gb.reason == "Failed to trace builtin operator"
    assert "print" in gb.detail
    assert gb.file == toy_print.__code__.co_filename
    assert gb.line == line_of(toy_print, 'print("woo")')
    assert 'print("woo")' in gb.excerpt
    assert gb.count == 2
    assert gb.compile_ids == ["0/0", "0/1"]
    expl = explain(opt)
    assert expl.graph_breaks == [gb]
    assert "Failed to trace builtin operator" in str(expl)


def test_data_dependent_branch_break():
    with observe() as obs:
        opt = torch.compile(toy_example, backend="eager")
        opt(torch.randn(10), torch.randn(10))
    (gb,) = obs.graph_breaks
    assert gb.reason == "Data-dependent branching"
    assert gb.line == line_of(toy_example, "if b.sum() < 0:")
    assert gb.function == "toy_example"


def _reasons(obs, name):
    return [rc for rc in obs.recompiles if rc.function == name]


def test_recompile_on_dtype_change_names_failing_guard():
    with observe() as obs:
        opt = torch.compile(scale, backend="eager")
        opt(torch.randn(4), 2)
        opt(torch.randn(4, dtype=torch.float64), 2)
    (rc,) = _reasons(obs, "scale")
    assert rc.compile_id == "0/1"
    assert rc.reason == "tensor 'x' dtype mismatch. expected Float, actual Double"
    f = rc.failures[0]
    assert (f.compile_id, f.subject, f.expected, f.actual) == ("0/0", "x", "Float", "Double")
    # both entries are cached now, newest first; each guards its own dtype
    entries = explain(opt).cache_entries
    assert [e.compile_id for e in entries] == ["0/1", "0/0"]
    x_checks = [g.text for g in next(g for g in entries[0].guards if g.subject == "x").guards]
    assert any("dtype float64" in t for t in x_checks)


def test_recompile_on_shape_change():
    with observe() as obs:
        opt = torch.compile(scale, backend="eager")
        opt(torch.randn(10), 2)
        opt(torch.randn(20), 2)
    (rc,) = _reasons(obs, "scale")
    assert rc.reason == "tensor 'x' size mismatch at index 0. expected 10, actual 20"
    assert (rc.failures[0].expected, rc.failures[0].actual) == ("10", "20")
    newest = explain(opt).cache_entries[0]
    x_text = " ".join(g.text for g in next(g for g in newest.guards if g.subject == "x").guards)
    assert "shape [any]" in x_text  # automatic dynamic shapes: the recompiled entry takes any length


def test_recompile_on_python_constant_change():
    with observe() as obs:
        opt = torch.compile(scale, backend="eager")
        opt(torch.randn(4), 2)
        opt(torch.randn(4), 3)
    (rc,) = _reasons(obs, "scale")
    assert rc.reason == "guard failed: n == 2"
    assert (rc.failures[0].subject, rc.failures[0].expected) == ("n", "2")
    assert "recompiled as 0/1: guard failed: n == 2" in str(explain(opt))
    n_group = next(g for g in explain(opt).cache_entries[-1].guards if g.subject == "n")
    assert n_group.guards[0].text == "n == 2"


def test_cache_limit_hit_and_eager_fallback():
    # torch 2.5.1 calls it cache_size_limit
    name = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    with torch._dynamo.config.patch(**{name: 2}), observe() as obs:
        opt = torch.compile(scale, backend="eager")
        for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
            opt(torch.randn(3, dtype=dtype), 2)
    (hit,) = obs.cache_limit_hits
    assert hit.function == "scale" and hit.limit == 2
    assert hit.file == scale.__code__.co_filename
    assert any(fb.function == "scale" and "recompile limit" in fb.reason.lower() for fb in obs.eager_fallbacks)
    assert "Recompile limit hits" in str(obs.report())


def test_compile_times_per_phase_matched_by_compile_id():
    with observe() as obs:
        opt = torch.compile(toy_example, backend="aot_eager")
        torch.manual_seed(0)
        for _ in range(10):
            opt(torch.randn(10), torch.randn(10))
    ids = [ct.compile_id for ct in obs.compile_times]
    assert sorted(ids) == ["0/0", "1/0", "2/0"]
    for ct in obs.compile_times:
        assert ct.status == "ok"
        assert ct.total_s > 0 and ct.aot_s is not None and ct.aot_s > 0
        parts = ct.dynamo_s + ct.aot_s + ct.backend_s
        assert abs(parts - ct.total_s) < 1e-6
    # with aot_eager the FX graph is gone from the compiled function; the observer kept Dynamo's
    sg = explain(opt).cache_entries[0].subgraphs[0]
    assert sg.fx_code and "torch.abs" in sg.fx_code and sg.op_count == 5


def test_function_compiled_before_observation_is_still_explained():
    opt = torch.compile(scale, backend="eager")
    opt(torch.randn(4), 2)
    obs = start_observing()
    opt2 = torch.compile(toy_example, backend="eager")
    opt2(torch.randn(10), torch.ones(10))
    stop_observing()
    names = [e.function.name for e in obs.report().explanations]
    assert names == ["toy_example", "scale"]
    assert obs.report().explanations[1].cache_entries[0].compile_id == "0/0"


def test_start_observing_is_idempotent_and_stop_detaches():
    obs = start_observing()
    assert start_observing() is obs
    assert stop_observing() is obs
    assert stop_observing() is None
    torch.compile(scale, backend="eager")(torch.randn(2), 1)
    assert obs.compile_times == []  # nothing recorded after stop
