"""The decompiler on real TorchDynamo output (torch 2.13): transformed code and resume functions.

Each cache entry's transformed code is decompiled, exec'd in the function's globals (where Dynamo
put `__compiled_fn_*` and `__resume_at_*`), and must return what the compiled function returns.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import types

import pytest

torch = pytest.importorskip("torch")

from support.explain_helpers import toy_example  # noqa: E402
from support.explain_helpers import two_breaks as toy_print  # noqa: E402  (a print break, then a branch)
from torch._dynamo.eval_frame import _debug_get_cache_entry_list  # noqa: E402  (tests may use private API)

from dynascope import _torch  # noqa: E402
from dynascope.decompiler import decompile, decompile_or_dis  # noqa: E402


def returns_forward(gm, example_inputs):
    return gm.forward


BACKENDS = ["eager", returns_forward]


def _inputs(sign: float, seed: int):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(10, generator=g), sign * torch.rand(10, generator=g) + sign * 0.1


def _rebuild(source: str, code, globals_: dict, closure: dict | None = None):
    namespace = dict(globals_)  # Dynamo's injected names live here; keep the module untouched
    exec(compile(source, "<decompiled>", "exec"), namespace)
    name = _def_name(code)
    if f"__closure_{name}" in namespace:  # a function that needs its free variables' cells
        return namespace[f"__closure_{name}"](*(closure[v] for v in code.co_freevars))
    return namespace[name]


def _def_name(code) -> str:
    return code.co_name if code.co_name.isidentifier() else "__decompiled__"


def _compile_and_run(fn, backend):
    compiled = torch.compile(fn, backend=backend)
    for seed, sign in enumerate((1.0, -1.0, 1.0, -1.0)):
        compiled(*_inputs(sign, seed))
    return compiled


def _entries_with_resume_functions(fn):
    """[(function owning the entry, cache entry)] for fn and, recursively, its resume functions
    (code objects where torch 2.5.1 makes them inline, with their cells)."""
    found, todo, seen = [], [fn], set()
    while todo:
        owner = todo.pop()
        for entry in _debug_get_cache_entry_list(owner):
            found.append((owner, entry))
            for name in entry.code.co_names:
                if name.startswith("__resume_at_") and name not in seen:
                    seen.add(name)
                    todo.append(fn.__globals__[name])
            for const in entry.code.co_consts:
                if isinstance(const, types.CodeType) and const.co_name.startswith("torch_dynamo_resume_in_"):
                    if const not in seen:
                        seen.add(const)
                        todo.append(const)
    return found


@pytest.mark.parametrize("backend", BACKENDS, ids=["eager", "gm.forward"])
def test_toy_example_main_frame_round_trips(backend):
    compiled = _compile_and_run(toy_example, backend)
    entries = _debug_get_cache_entry_list(toy_example)
    assert entries, "Dynamo produced no cache entry"
    for entry in entries:
        source = decompile(entry.code)
        assert "__compiled_fn_" in source and "__resume_at_" in source
        assert "BUILD_LIST" not in source and "__temp" not in source
        rebuilt = _rebuild(source, entry.code, toy_example.__globals__)
        for seed, sign in enumerate((1.0, -1.0, -1.0, 1.0)):
            a, b = _inputs(sign, 100 + seed)
            expected = compiled(a.clone(), b.clone())
            got = rebuilt(a.clone(), b.clone())
            torch.testing.assert_close(got, expected)
            torch.testing.assert_close(got, toy_example(a, b))


def test_data_dependent_branch_reads_as_an_if():
    _compile_and_run(toy_example, returns_forward)
    source = decompile(_debug_get_cache_entry_list(toy_example)[0].code)
    # the graph's branch condition decides which resume function runs, in plain Python
    assert "if " in source
    assert source.count("return __resume_at_") == 2
    if "record_pregraph_bytecode_enter" in _debug_get_cache_entry_list(toy_example)[0].code.co_names:  # torch 2.13
        assert "record_pregraph_bytecode_enter()" in source


@pytest.mark.parametrize("backend", BACKENDS, ids=["eager", "gm.forward"])
def test_resume_functions_and_their_entries_round_trip(backend):
    _compile_and_run(toy_example, backend)
    checked = 0
    for owner, entry in _entries_with_resume_functions(toy_example):
        if owner is toy_example:
            continue
        assert owner.__code__.co_name.startswith("torch_dynamo_resume_in_toy_example_at_")
        original_source, ok = decompile_or_dis(owner)  # the JUMP_FORWARD-prologue original
        assert ok, original_source
        original = _rebuild(original_source, owner.__code__, owner.__globals__)
        transformed = _rebuild(decompile(entry.code), entry.code, owner.__globals__)
        lead = [[] for _ in range(owner.__code__.co_argcount - 2)]  # torch 2.13 passes two stack lists first
        for seed in range(3):
            b, x = _inputs(1.0 if seed % 2 else -1.0, 200 + seed)
            expected = owner(*lead, b.clone(), x.clone())
            torch.testing.assert_close(original(*lead, b.clone(), x.clone()), expected)
            torch.testing.assert_close(transformed(*lead, b.clone(), x.clone()), expected)
            checked += 1
    assert checked >= 6  # two resume functions, each with a cache entry


@pytest.mark.parametrize("backend", BACKENDS, ids=["eager", "gm.forward"])
def test_print_graph_break_round_trips(backend, capsys):
    compiled = _compile_and_run(toy_print, backend)
    entries = _entries_with_resume_functions(toy_print)
    assert len(entries) >= 3
    main = [e for owner, e in entries if owner is toy_print]
    for entry in main:
        source = decompile(entry.code)
        assert "('woo')" in source  # the print call Dynamo could not trace, kept in order
        rebuilt = _rebuild(source, entry.code, toy_print.__globals__)
        for seed, sign in enumerate((1.0, -1.0)):
            a, b = _inputs(sign, 300 + seed)
            capsys.readouterr()
            expected = compiled(a.clone(), b.clone())
            printed_by_compiled = capsys.readouterr().out
            got = rebuilt(a.clone(), b.clone())
            assert capsys.readouterr().out == printed_by_compiled == "woo\n"
            torch.testing.assert_close(got, expected)
    for owner, entry in entries:
        if owner is not toy_print:
            source, ok = decompile_or_dis(entry.code)
            assert ok, source


def grad_break(x):
    with torch.no_grad():
        y = x * 2
        print("inside")
        y = y + 1
    return y.sum(), torch.is_grad_enabled()


def many_live_values(a, b, c):
    u = a + b
    v = b * c
    w = {"k": u, "j": [v, a]}
    if u.sum() > v.sum():
        out = w["k"] - w["j"][0]
    else:
        out = w["j"][1]
    return out, len(w)


class Branchy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, scale=2.0):
        h = self.lin(x)
        if h.sum() > 0:
            h = h * scale
        print("m")
        return torch.relu(h), h.mean()


def _assert_same(got, expected):
    if isinstance(expected, tuple):
        assert isinstance(got, tuple) and len(got) == len(expected)
        for g, e in zip(got, expected, strict=True):
            _assert_same(g, e)
    elif isinstance(expected, torch.Tensor):
        torch.testing.assert_close(got, expected)
    else:
        assert got == expected


def _clones(args):
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


def _check_main_entries(fn, compiled, calls):
    """Decompile every cache entry of `fn`; each must match the compiled function on `calls`, and so
    must the whole decompiled chain (resume functions running their decompiled entries too)."""
    entries = _debug_get_cache_entry_list(fn)
    assert entries
    for entry in entries:
        rebuilt = _rebuild(decompile(entry.code), entry.code, fn.__globals__)
        for args in calls:
            _assert_same(rebuilt(*_clones(args)), compiled(*_clones(args)))
    chain = DecompiledChain(fn)
    for args in calls:
        _assert_same(chain(*_clones(args)), compiled(*_clones(args)))
    return chain


class DecompiledChain:
    """Runs what Dynamo made of `fn` as decompiled source only: the transformed code of the cache
    entry whose guards accept the arguments is decompiled and exec'd, and each call it makes to a
    `__resume_at_*` function runs that resume function's decompiled entry the same way.  Every
    resume function reached is also checked the other way round: its original (prologue) code,
    decompiled, must behave like the original on the arguments it was called with."""

    def __init__(self, fn):
        self.fn = fn
        self.ran: list = []  # code objects whose decompiled transformed code ran
        self.resumed: list = []  # resume functions as called
        self.eager: list = []  # frames Dynamo left alone for the arguments they got

    def __call__(self, *args, **kwargs):
        return self.run(self.fn, args, kwargs)

    def run(self, fn, args, kwargs=None):
        bound = inspect.signature(fn).bind(*args, **(kwargs or {}))
        bound.apply_defaults()
        closure = _closure_values(fn)
        f_locals = {**bound.arguments, **closure}
        entry = next((e for e in _debug_get_cache_entry_list(fn) if _torch.check_entry_guards(e, f_locals)[0]), None)
        if entry is None:  # these inputs (seen by the compiled run first) made Dynamo run the frame as is
            self.eager.append(fn)
            return fn(*bound.args, **bound.kwargs)
        source = _intercept_inline_resumes(decompile(entry.code), entry.code)
        namespace = {**fn.__globals__, **closure}  # a bare code object has no closure: give its values
        for name in _called_names(source):
            if name.startswith("__resume_at_"):  # resume functions passed as data keep their identity
                namespace[name] = self.resume(fn.__globals__[name])
        namespace[INLINE_RESUME] = lambda made, index: self.resume(
            _dynamo_function(made, entry.code.co_consts[index], fn.__globals__, closure))
        rebuilt = _rebuild(source, entry.code, namespace, closure)
        self.ran.append(entry.code)
        return rebuilt(*bound.args, **bound.kwargs)

    def resume(self, resume_fn):
        if not resume_fn.__code__.co_name.startswith("torch_dynamo_resume_in_"):
            return lambda closure: self.resume(resume_fn(closure))  # makes the resume function from cells

        def call(*args):
            self.resumed.append(resume_fn)
            self.check_original(resume_fn, args)
            return self.run(resume_fn, args)

        return call

    def check_original(self, resume_fn, args):
        """The resume function as Dynamo wrote it (a prologue jumping into the original code),
        decompiled, must behave like itself; both run on fresh cells, leaving the real ones alone."""
        closure = _closure_values(resume_fn)
        source, ok = decompile_or_dis(resume_fn)
        assert ok, source
        original = _rebuild(source, resume_fn.__code__, {**resume_fn.__globals__, **closure}, closure)
        cells = tuple(types.CellType(closure[v]) for v in resume_fn.__code__.co_freevars)
        fresh = types.FunctionType(resume_fn.__code__, resume_fn.__globals__, resume_fn.__name__, None, cells)
        with contextlib.redirect_stdout(io.StringIO()) as printed_by_decompiled:
            got = original(*_copies(args))
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            _assert_same(got, fresh(*_copies(args)))
        assert printed_by_decompiled.getvalue() == printed.getvalue()


INLINE_RESUME = "__chain_inline_resume__"


def _intercept_inline_resumes(source: str, code) -> str:
    """torch 2.5.1 makes a resume function that has free variables inline (MAKE_FUNCTION with its
    cells, a nested def once decompiled) instead of calling a global maker: each such def is
    followed by `name = __chain_inline_resume__(name, <its code's index in co_consts>)`, so the
    chain runs that code's cache entry."""
    tree = ast.parse(source)
    rebuilt = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == _def_name(code))
    for node in ast.walk(rebuilt):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        node.body = []
        for stmt in body:
            node.body.append(stmt)
            if isinstance(stmt, ast.FunctionDef) and stmt.name.startswith("torch_dynamo_resume_in_"):
                args = [ast.Name(stmt.name, ast.Load()), ast.Constant(_code_constant_index(stmt, code))]
                call = ast.Call(func=ast.Name(INLINE_RESUME, ast.Load()), args=args, keywords=[])
                node.body.append(ast.Assign(targets=[ast.Name(stmt.name, ast.Store())], value=call))
    return ast.unparse(ast.fix_missing_locations(tree))


def _code_constant_index(stmt: ast.FunctionDef, transformed) -> int:
    """Which code constant a nested resume def was decompiled from: several can share a name
    (two resume points on one line)."""
    wanted = ast.dump(stmt)
    for index, const in enumerate(transformed.co_consts):
        if isinstance(const, types.CodeType) and const.co_name == stmt.name:
            defs = ast.walk(ast.parse(decompile(const)))
            if any(isinstance(n, ast.FunctionDef) and n.name == stmt.name and ast.dump(n) == wanted for n in defs):
                return index
    raise AssertionError(f"no code constant of {transformed.co_name} decompiles to {stmt.name}")


def _dynamo_function(made, code, globals_: dict, closure: dict):
    """The function Dynamo's code makes where the decompiled code made `made`: the resume code
    object itself (its cache entries live there), with made's cells; a free variable its body
    never reads (`__class__`) is not captured there: a fresh cell."""
    cells = dict(zip(made.__code__.co_freevars, made.__closure__ or (), strict=True))
    return types.FunctionType(code, globals_, made.__name__, made.__defaults__,
                              tuple(cells.get(v) or types.CellType(closure[v]) for v in code.co_freevars))


def _closure_values(fn) -> dict:
    return dict(zip(fn.__code__.co_freevars, (cell.cell_contents for cell in fn.__closure__ or ()), strict=True))


def _called_names(source: str) -> set[str]:
    return {node.func.id for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}


def _copies(args):
    """Resume functions get lists they empty (`__nested_frame_values[:] = []`): copy those, clone tensors."""
    return [list(a) if isinstance(a, list) else a.clone() if isinstance(a, torch.Tensor) else a for a in args]


def test_graph_break_inside_no_grad(capsys):
    compiled = torch.compile(grad_break, backend="eager")
    x = torch.randn(5, requires_grad=True)
    compiled(x)
    _check_main_entries(grad_break, compiled, [(x,), (torch.randn(5, requires_grad=True),)])
    assert torch.is_grad_enabled()  # the decompiled code restored grad mode like Dynamo's did
    for owner, entry in _entries_with_resume_functions(grad_break):
        source, ok = decompile_or_dis(entry.code)
        assert ok, source


def test_values_live_across_a_data_dependent_branch():
    compiled = torch.compile(many_live_values, backend=returns_forward)
    g = torch.Generator().manual_seed(7)
    a, b, c = (torch.randn(6, generator=g) for _ in range(3))
    compiled(a, b, c)
    compiled(-10 * a.abs(), b, c)
    _check_main_entries(many_live_values, compiled, [(a, b, c), (-10 * a.abs(), b, c), (10 * a.abs(), b, c)])


def test_module_forward_with_break_and_branch(capsys):
    module = Branchy()
    compiled = torch.compile(module, backend="eager")
    x = torch.randn(3, 4)
    compiled(x)
    compiled(-x)
    forward = type(module).forward
    for entry in _debug_get_cache_entry_list(forward):
        source = decompile(entry.code)
        # a code object has no defaults: the caller passes `scale` explicitly
        rebuilt = _rebuild(source, entry.code, forward.__globals__)
        for inputs in (x, -x, 3 * x):
            _assert_same(rebuilt(module, inputs.clone(), 2.0), compiled(inputs.clone()))
    for owner, entry in _entries_with_resume_functions(forward):
        source, ok = decompile_or_dis(entry.code)
        assert ok, source


# ---- whole chains: main frame and resume functions, all run as decompiled source -------------
def loop_after_break(x, n):
    print("a")
    for i in range(n):
        if i % 2:
            x = x * 2
        else:
            x = x - 1
    ys = [x * k for k in range(n) if k]
    return sum(ys), x


def while_after_break(x):
    print("w")
    i = 0
    while x.sum() < 100 and i < 50:
        x = x * 2 + 1
        i += 1
    return x, i


def _helper_with_break(x, *, shift=1):
    x = x + shift
    print("h")
    if x.sum() > 0:
        return x * 3
    return x - 3


def break_in_nested_call(x):
    y = x.sin()
    y = _helper_with_break(y, shift=2)
    return y.cos(), f"{len(y)}"


def nested_break_inside_with(x):
    with torch.no_grad():
        y = _helper_with_break(x)
    return y * 2, torch.is_grad_enabled()


def keyword_call_break(x, **options):
    y = torch.nn.functional.softmax(x, dim=0)
    print("kw", sorted(options))
    return torch.clamp(y, min=0.0, max=0.5), options.get("k", -1)


def try_after_break(x, divisor):
    y = x.exp()
    print("t")
    try:
        y = y * (1 // divisor)
    except ZeroDivisionError:
        y = -y
    finally:
        y = y + 1
    return y


class SuperBranchy(Branchy):
    def forward(self, x, scale=3.0):
        h, m = super().forward(x, scale)
        print("s")
        if m > 0:
            return h - m
        return h + m


def _tensor(sign, seed, n=6):
    g = torch.Generator().manual_seed(seed)
    return sign * (torch.rand(n, generator=g) + 0.1)


CHAINS = {
    "toy_example": (toy_example, [_inputs(1.0, 0), _inputs(-1.0, 1), _inputs(-1.0, 2)], {}),
    "print_then_branch": (toy_print, [_inputs(1.0, 3), _inputs(-1.0, 4)], {}),
    "with_no_grad": (grad_break, [(torch.randn(5, requires_grad=True),)], {}),
    "loop_in_resume_function": (loop_after_break, [(_tensor(1.0, 5), 4), (_tensor(-1.0, 6), 3)], {}),
    "data_dependent_while": (while_after_break, [(_tensor(1.0, 7),), (_tensor(-1.0, 8),)], {}),
    "break_in_nested_call": (break_in_nested_call, [(_tensor(1.0, 9),), (_tensor(-1.0, 10),)],
                             {"nested_graph_breaks": True}),
    "nested_break_inside_with": (nested_break_inside_with, [(_tensor(1.0, 11),), (_tensor(-1.0, 12),)],
                                 {"nested_graph_breaks": True}),
    "try_in_resume_function": (try_after_break, [(_tensor(1.0, 15), 2), (_tensor(1.0, 16), 0)],
                               {"automatic_dynamic_shapes": False}),
    "keyword_call_break": (keyword_call_break, [(_tensor(1.0, 13),), ((_tensor(-1.0, 14),), {"k": 2})], {}),
}


def _call(fn, args):
    if len(args) == 2 and isinstance(args[0], tuple) and isinstance(args[1], dict):
        return fn(*_clones(args[0]), **args[1])
    return fn(*_clones(args))


@pytest.mark.parametrize("case", sorted(CHAINS))
def test_decompiled_chain_behaves_like_dynamo(case, capsys):
    fn, calls, config = CHAINS[case]
    missing = [key for key in config if not hasattr(torch._dynamo.config, key)]
    if missing:
        pytest.skip(f"torch {torch.__version__} has no {missing}")
    with torch._dynamo.config.patch(**config):
        compiled = torch.compile(fn, backend="eager")
        try:
            for args in calls:
                _call(compiled, args)
        except torch._dynamo.exc.InternalTorchDynamoError as exc:  # torch 2.8.0 on try_in_resume_function
            pytest.skip(f"torch {torch.__version__} cannot compile this case itself ({str(exc).splitlines()[0]})")
        chain = DecompiledChain(fn)
        for args in calls:
            capsys.readouterr()
            expected = _call(compiled, args)
            printed = capsys.readouterr().out
            _assert_same(_call(chain, args), expected)
            assert capsys.readouterr().out == printed
    assert chain.ran and chain.resumed, "the case should make Dynamo break the graph and resume"
    assert all(code.co_name != fn.__name__ or code in chain.ran for code in chain.ran)


def test_module_chain_with_super_and_defaults(capsys):
    module = SuperBranchy()
    compiled = torch.compile(module, backend="eager")
    x = torch.randn(3, 4)
    calls = [(module, x), (module, -x), (module, 3 * x)]
    for _, inputs in calls:
        compiled(inputs.clone())
    chain = DecompiledChain(type(module).forward)
    for m, inputs in calls:
        capsys.readouterr()
        expected = compiled(inputs.clone())
        printed = capsys.readouterr().out
        _assert_same(chain(m, inputs.clone()), expected)
        assert capsys.readouterr().out == printed
    assert len(chain.resumed) >= 3
    forward = SuperBranchy.forward  # the user's method itself: zero-argument super() needs its __class__ cell
    rebuilt = _rebuild(decompile(forward), forward.__code__, forward.__globals__, _closure_values(forward))
    with contextlib.redirect_stdout(io.StringIO()):
        _assert_same(rebuilt(module, x.clone()), forward(module, x.clone()))
