"""Every private-torch accessor in dynascope._torch, on a real compile with the installed torch: each
gives what its docstring says, or (for what the torch never had) the one-line "not available" error."""

import pytest
import torch

from dynascope import _torch
from dynascope.errors import TorchVersionError


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def branchy(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


def _seen_by_backend():
    seen = {}

    def backend(gm, example_inputs):
        seen.setdefault("graph_name", _torch.graph_name(gm))  # the first graph: branchy's own
        seen.setdefault("compile_id", _torch.current_compile_id())
        return gm.forward

    return backend, seen


def test_capture_side_accessors():
    backend, seen = _seen_by_backend()
    torch.compile(branchy, backend=backend)(torch.randn(4), torch.randn(4))
    assert seen["graph_name"].startswith("__compiled_fn_") and seen["compile_id"] == "0/0"
    assert callable(_torch.aot_autograd(fw_compiler=lambda gm, _: gm.forward))
    assert callable(_torch.min_cut_partitioner()) and callable(_torch.lookup_backend("aot_eager"))
    assert hasattr(_torch.boxed_codegen(), "gen_fn_def")


def test_inductor_kernel_tracing_accessors():
    import torch._functorch.config as functorch_config

    compile_fx, compile_fx_inner = _torch.inductor_compilers()
    assert compile_fx.__name__ == "compile_fx" and compile_fx_inner.__name__ == "compile_fx_inner"
    patch = _torch.inductor_provenance_patch()
    assert patch in ({}, {"trace.provenance_tracking_level": 1})
    assert bool(patch) or not _torch.torch_at_least(2, 13)  # 2.5.1 has no provenance tracking; 2.13, 2.15 do
    with functorch_config.patch(enable_autograd_cache=True), _torch.without_autograd_cache():
        assert functorch_config.enable_autograd_cache is False
    with pytest.raises(TorchVersionError, match=r"object\.current_callable \(inductor's compiled graph\)"):
        _torch.wrapper_call(object())
    assert _torch.kernel_provenance(object()) == {}
    assert _torch.inductor_cpp_wrapper({}) is False and _torch.inductor_cpp_wrapper({"cpp_wrapper": True}) is True


def test_boxed_codegen_takes_one_list_and_clears_it():
    gm = torch.fx.symbolic_trace(lambda x, y: x * y + 1)
    gm.graph.set_codegen(_torch.boxed_codegen())
    gm.recompile()
    args = [torch.ones(2), torch.full((2,), 3.0)]
    torch.testing.assert_close(gm.forward(args), torch.full((2,), 4.0))
    assert args == []


def test_structured_records_carry_compile_ids():
    records = []
    remove = _torch.add_structured_trace_handler(lambda record, payload: records.append(record))
    try:
        torch.compile(branchy, backend="eager")(torch.randn(4), torch.randn(4))
    finally:
        remove()
    ids = {_torch.record_compile_id(r) for r in records if "dynamo_start" in r}
    assert {"0/0", "1/0"} <= ids


def test_explain_side_accessors():
    hooked = []
    remove = _torch.register_bytecode_hook(lambda old, new: hooked.append(old.co_name))
    start = _torch.graph_break_count()
    try:
        compiled = torch.compile(branchy, backend="eager")
        compiled(torch.randn(4), torch.randn(4))
    finally:
        remove()
    assert hooked[0] == "branchy"
    (entry,) = _torch.cache_entries(branchy.__code__)
    assert _torch.entry_compile_id(entry) == "0/0"
    sources = {row["source"] for row in _torch.guard_tree(entry)}
    assert {"L['a']", "L['b']"} <= sources
    assert any("check_tensor" in part or "TENSOR_MATCH" in part for part in _torch.guard_code_parts(entry))
    assert _torch.check_entry_guards(entry, {"a": torch.randn(4), "b": torch.randn(4)})[0]
    miss = {"a": torch.randn(4, dtype=torch.float64), "b": torch.randn(4)}
    assert not _torch.check_entry_guards(entry, miss)[0]
    assert "dtype mismatch" in _torch.guard_fail_reason(entry, miss)
    (reason, stack), *_ = _torch.graph_breaks_since(start)
    assert stack[-1][2] == "branchy" and reason
    rows = _torch.compilation_metrics()
    assert any(r.get("co_name") == "branchy" and r.get("compile_id") == "0/0" for r in rows)
    assert isinstance(_torch.recompile_limit(), int)
    assert _torch.unwrap_compiled(compiled) is branchy


def test_features_missing_from_the_torch_say_so_in_one_line():
    torch.compile(branchy, backend="eager")(torch.randn(4), torch.randn(4))
    (entry,) = _torch.cache_entries(branchy.__code__)
    # what each torch has (checked on 2.5.1, 2.8.0, 2.9.1, 2.10, 2.11, 2.12.1, 2.13, 2.15): backend names
    # from 2.10, guard user lines from 2.9; where missing, one line says so
    missing = []
    if _torch.torch_at_least(2, 10):
        assert _torch.entry_backend_name(entry) == "eager"
    else:
        missing.append(lambda: _torch.entry_backend_name(entry))
    if _torch.torch_at_least(2, 9):
        _torch.check_guard_user_lines()
    else:
        missing.append(_torch.check_guard_user_lines)
    for read in missing:
        with pytest.raises(TorchVersionError) as info:
            read()
        text = str(info.value)
        assert "\n" not in text and f"not available on torch {torch.__version__}" in text and "2.13" in text


def test_compile_profile_hooks_see_every_step_and_go_away():
    from torch._dynamo.symbolic_convert import InstructionTranslatorBase

    seen, finished = [], []

    def wrap_step(original):
        def step(tx):
            seen.append((tx.f_code.co_name, tx.lineno))
            return original(tx)
        return step

    def wrap_finish(original):
        def finish(*args, **kwargs):
            finished.append(True)
            return original(*args, **kwargs)
        return finish

    before = InstructionTranslatorBase.step
    remove = _torch.hook_dynamo_tracing(wrap_step, wrap_finish, wrap_finish)
    try:
        torch.compile(branchy, backend="eager")(torch.randn(4), torch.randn(4))
    finally:
        remove()
    assert InstructionTranslatorBase.step is before
    assert ("branchy", branchy.__code__.co_firstlineno + 1) in seen and finished
    assert isinstance(_torch.has_dynamo_profiler(), bool)
    assert _torch.torch_package_dir().endswith("torch")


def test_a_replacing_bytecode_hook_installs_the_code_it_returns():
    torch._dynamo.reset()
    made = []

    def replace(old, new):
        made.append(new.replace(co_name=new.co_name))  # an equal copy: a different code object
        return made[-1]

    remove = _torch.register_replacing_bytecode_hook(replace)
    try:
        torch.compile(branchy, backend="eager")(torch.randn(4), torch.randn(4))
    finally:
        remove()
    (entry,) = _torch.cache_entries(branchy.__code__)
    assert entry.code is made[0]
    torch._dynamo.reset()


def test_dataloader_accessors():
    from torch.utils.data import DataLoader

    base, multi = _torch.dataloader_iterator_classes()
    iterator = iter(DataLoader(list(range(10)), batch_size=4))
    assert isinstance(iterator, base) and not isinstance(iterator, multi)
    next(iterator)
    next(iterator)
    assert _torch.dataloader_batch_index(iterator) == 1 and _torch.dataloader_workers(iterator) == 0
    assert all(callable(cls.fetch) for cls in _torch.dataloader_fetcher_classes())
    assert _torch.worker_task_index(None) is None  # not the worker loop's frame: no index, no error


def test_force_eager_runs_code_compiled_before_eagerly():
    """Cached compiled code must not run either (torch 2.5.1's config.disable alone let it)."""

    def doubled_by_backend(gm, example_inputs):
        return lambda *args: [2 * out for out in gm(*args)]  # a backend whose results differ from eager

    fn = torch.compile(lambda x: torch.relu(x) + 1, backend=doubled_by_backend)
    x = torch.randn(4)
    eager = torch.relu(x) + 1
    assert torch.equal(fn(x), 2 * eager)  # compiled, cached
    with _torch.force_eager():
        assert torch.equal(fn(x), eager)
    assert torch.equal(fn(x), 2 * eager)  # compiled again after the context


def test_frame_probe_accessors():
    """add_probes puts a reading at a generated frame's start and before each return (branchy's transformed
    code has two: one per branch's resume call); the break the frame split at is in graph_breaks_since,
    named as torch 2.6+ names it; skip_frames_of is there (the compiled-call wrapper's tests use it)."""
    import collections
    import types

    recorded: list = []
    target = types.SimpleNamespace(extend=recorded.extend)
    clock = iter(range(1000, 2000)).__next__
    mark = _torch.graph_break_count()
    probed = {}

    def hook(code, new_code):
        if code.co_name == "branchy":
            probed["code"] = _torch.add_probes(new_code, target, clock, -1, -2)
            return probed["code"]
        return None

    remove = _torch.register_replacing_bytecode_hook(hook)
    try:
        compiled = torch.compile(branchy, backend="eager")
        a, b = torch.randn(4), torch.randn(4)
        torch.testing.assert_close(compiled(a, b), branchy(a, b))
    finally:
        remove()
    counts = collections.Counter(v for v in recorded if isinstance(v, int) and v < 0)
    assert counts == {-1: 1, -2: 1} and len(recorded) == 4  # (id, clock) at the start, at the return taken
    reasons = [_torch.break_reason_name(reason) for reason, _ in _torch.graph_breaks_since(mark)]
    assert "Data-dependent branching" in reasons

    def wrapper(x):
        return compiled(x, x)

    _torch.skip_frames_of(wrapper)
    torch.testing.assert_close(wrapper(a), branchy(a, a))
    assert _torch.break_reason_name("call torch._dynamo.disable() wrapped function <function f at 0x7f1>") == (
        "call torch._dynamo.disable() wrapped function f")


def test_inductors_peak_memory_pass_is_watched_and_left_as_it_was():
    try:
        from torch._inductor import memory as inductor_memory
    except ImportError:  # torch 2.5: no such pass, and one line says so
        with pytest.raises(TorchVersionError, match="inductor's own peak-memory estimate: not available"):
            _torch.on_inductor_peak(lambda is_backward, peak: None)
        return
    before = (inductor_memory.reorder_for_peak_memory, inductor_memory.estimate_peak_memory)
    remove = _torch.on_inductor_peak(lambda is_backward, peak: None)
    assert inductor_memory.reorder_for_peak_memory is not before[0]
    remove()
    assert (inductor_memory.reorder_for_peak_memory, inductor_memory.estimate_peak_memory) == before
