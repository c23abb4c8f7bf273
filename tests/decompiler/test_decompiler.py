"""The decompiler on ordinary Python: every probe function must round-trip on this interpreter."""

from __future__ import annotations

import ast
import dis
import inspect
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import probe_corpus as probe
import pytest

from dynascope.decompiler import DecompileError, decompile, decompile_or_dis
from dynascope.errors import DynascopeError

SRC = Path(__file__).resolve().parents[2] / "src"
PROBE_CORPUS = Path(__file__).resolve().parent / "probe_corpus.py"
PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"


@pytest.mark.parametrize("sample", probe.SAMPLES, ids=lambda s: s.func.__name__)
def test_probe_function_round_trips(sample):
    result = probe.check(sample)
    assert result.passed, f"{result.detail}\n{result.source}"


def test_probe_has_at_least_forty_functions():
    assert len(probe.SAMPLES) >= 40


def test_output_keeps_what_depyf_loses():
    fstrings = decompile(probe.fstrings)
    assert "{x!r}" in fstrings and "{s!a}" in fstrings and ":.2f" in fstrings
    handlers = decompile(probe.try_except)
    assert "except ZeroDivisionError:" in handlers and "except TypeError as e:" in handlers
    swap = decompile(probe.tuple_swap)
    namespace: dict = {}
    exec(swap, namespace)
    assert namespace["tuple_swap"](1, 2)[:2] == (2, 1)


def test_accepts_code_objects_and_methods():
    code_source = decompile(probe.if_else.__code__)
    assert code_source.startswith("def if_else(a, b):")

    class Holder:
        def method(self, v):
            return v + 1

    assert "def method(self, v):" in decompile(Holder().method)


def test_output_compiles():
    for sample in probe.SAMPLES:
        source, ok = decompile_or_dis(sample.func)
        if ok:
            ast.parse(source)


STAR_IMPORT = compile("from os.path import *", "star_import", "exec")  # module code: not a function body


def test_unsupported_code_falls_back_to_annotated_dis():
    with pytest.raises(DecompileError):
        decompile(STAR_IMPORT)
    text, ok = decompile_or_dis(STAR_IMPORT)
    assert not ok
    assert text.startswith("# dynascope could not decompile <module>")
    assert "# reason: DecompileError" in text
    assert "IMPORT_STAR" in text  # the listing itself follows the header


def _class_inside(x):
    class Local:
        value = x

        def get(self):
            return super().__repr__(), self.value

    return Local


def test_class_statement_inside_a_function():
    source = decompile(_class_inside)
    assert "class Local:" in source and "value = x" in source and "__qualname__" not in source
    namespace: dict = {}
    exec(source, namespace)
    local = namespace["_class_inside"](5)
    assert local.value == 5 and local().get()[1] == 5


async def _async_everything(source, lock):
    async with lock as held:
        total = await source.first()
    async for item in source:
        total += item
    return [x async for x in source], total, held


def _delegating(inner):
    got = yield from inner
    return got


def test_async_and_yield_from_read_as_written():
    source = decompile(_async_everything)
    assert source.startswith("async def _async_everything(source, lock):")
    for piece in ("async with lock as held:", "total = await source.first()", "async for item in source:",
                  "[x async for x in source]"):
        assert piece in source, source
    assert "got = (yield from inner)" in decompile(_delegating)


EXCEPT_STAR = """
def handle(run):
    try:
        run()
    except* ValueError as group:
        return_value = len(group.exceptions)
    except* (TypeError, KeyError):
        return_value = -1
    return return_value
"""


@pytest.mark.skipif(sys.version_info < (3, 11), reason="except* is 3.11+")
def test_except_star_reads_as_written():
    namespace: dict = {}
    exec(EXCEPT_STAR, namespace)
    source = decompile(namespace["handle"])
    assert "except* ValueError as group:" in source and "except* (TypeError, KeyError):" in source


FUTURE_ANNOTATIONS = """
from __future__ import annotations

def make():
    class Point:
        x: int
        y: list[Point] = []

    def scale(p: Point, k: float = 2) -> Point:
        return p

    return Point, scale
"""


def test_annotations_survive_under_future_annotations():
    flags = __import__("__future__").annotations.compiler_flag
    namespace: dict = {}
    exec(compile(FUTURE_ANNOTATIONS, "future", "exec", dont_inherit=True), namespace)
    source = decompile(namespace["make"])
    again: dict = {}
    exec(compile(source, "again", "exec", flags=flags, dont_inherit=True), again)
    (point, scale), (point2, scale2) = namespace["make"](), again["make"]()
    assert point2.__annotations__ == point.__annotations__ == {"x": "int", "y": "list[Point]"}
    assert scale2.__annotations__ == scale.__annotations__


def test_decompile_error_is_a_dynascope_error():
    assert issubclass(DecompileError, DynascopeError)
    with pytest.raises(DecompileError):
        decompile(42)
    text, ok = decompile_or_dis(42)
    assert not ok and "could not decompile" in text


@pytest.mark.parametrize("version", ["3.10", "3.12", "3.13"])
def test_probe_on_other_interpreters(version):
    candidates = sorted(PYENV.glob(f"{version}.*/bin/python"))
    if not candidates:
        pytest.skip(f"no CPython {version} under {PYENV}")
    env = dict(os.environ, PYTHONPATH=str(SRC))
    proc = subprocess.run([str(candidates[-1]), str(PROBE_CORPUS), "--quiet"],
                          capture_output=True, check=False, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    match = re.search(r"decompiler probe: (\d+)/(\d+) passed \(python (\d+\.\d+)\)", proc.stdout)
    assert match, proc.stdout[-2000:]
    passed, total, reported = int(match[1]), int(match[2]), match[3]
    assert reported == version
    assert total >= 40
    assert passed == total, proc.stdout


def _stdlib_functions():
    import bisect
    import fnmatch
    import heapq
    import posixpath
    import shlex
    import statistics
    import textwrap

    for module in (bisect, fnmatch, heapq, posixpath, shlex, statistics, textwrap):
        for value in vars(module).values():
            if inspect.isfunction(value) and value.__module__ == module.__name__:
                yield value
            elif inspect.isclass(value) and value.__module__ == module.__name__:
                yield from (v for v in vars(value).values() if inspect.isfunction(v))


def test_stdlib_sweep_only_ever_raises_decompile_error():
    """Real-world code: most decompiles to source that compiles, the rest fails cleanly."""
    functions = list(_stdlib_functions())
    compiled = 0
    for func in functions:
        try:
            source = decompile(func)
        except DecompileError:
            text, ok = decompile_or_dis(func)
            assert not ok and "# reason:" in text
            continue
        compile(source, func.__qualname__, "exec")
        compiled += 1
    assert len(functions) > 100
    assert compiled >= 0.9 * len(functions)


def _make_counter():
    count = 0

    def bump(step=1):
        nonlocal count
        count += step
        return count

    return bump


def test_closure_that_assigns_a_free_variable_comes_with_its_scope():
    bump = _make_counter()
    source = decompile(bump)
    assert "nonlocal count" in source
    namespace: dict = {}
    exec(source, namespace)
    recreated = namespace["__closure_bump"](10)
    assert recreated() == 11 and recreated(5) == 16


def _stdlib_behaviour_cases():
    import colorsys
    import posixpath
    import shlex
    import statistics
    import string
    import textwrap
    import urllib.parse

    return [
        (textwrap.indent, [("a\nb\n", "> "), ("a\n\nb", "+", None)]),
        (textwrap.shorten, [("Hello  world, this is long", 12), ("hi", 10)]),
        (shlex.quote, [("a b",), ("",), ("safe",), ("it's",)]),
        (posixpath.normpath, [("a//b/../c/.",), ("/../x",), ("",)]),
        (posixpath.join, [("a", "b", "/c", "d")]),
        (posixpath.relpath, [("/a/b/c", "/a/d")]),
        (statistics.median, [([3, 1, 2],), ([1, 2],), ([],)]),
        (string.capwords, [("hello  world",), ("a-b c", "-")]),
        (colorsys.rgb_to_hsv, [(0.2, 0.4, 0.6), (0, 0, 0), (1, 1, 1)]),
        (colorsys.hls_to_rgb, [(0.5, 0.5, 0.5), (0.1, 0.9, 0.2)]),
        (urllib.parse.quote, [("a b/c?d",)]),
        (urllib.parse.urlsplit, [("http://u@h:80/p?q#f",)]),
    ]


def test_stdlib_functions_behave_the_same_after_decompiling():
    checked = 0
    for func, inputs in _stdlib_behaviour_cases():
        source, ok = decompile_or_dis(func)
        if not ok:
            continue
        namespace = dict(func.__globals__)
        exec(source, namespace)
        recreated = namespace[func.__code__.co_name]
        for args in inputs:
            assert probe._outcome(recreated, args, {}) == probe._outcome(func, args, {}), (func, args, source)
            checked += 1
    assert checked >= 20


def _round_trips(func) -> str:
    sample = next(s for s in probe.SAMPLES if s.func is func)
    result = probe.check(sample)
    assert result.passed, f"{result.detail}\n{result.source}"
    return result.source


def test_except_clauses_that_return_inside_try_finally():
    source = _round_trips(probe.try_except_else_finally_return)
    assert "finally:" in source and "except ZeroDivisionError:" in source and "except TypeError as e:" in source
    assert source.count("log.append('fin')") == 1  # the finally body once, not its inlined copies


def test_break_and_continue_through_finally_run_it_once():
    for func in (probe.break_continue_in_try_finally, probe.try_finally_in_while, probe.return_inside_try_finally):
        source = _round_trips(func)
        assert source.count("'f'") + source.count("'fin'") == 1, source
    assert "break" in decompile(probe.break_continue_in_try_finally)


def test_finally_bodies_whose_reraise_is_copied_onto_branches():
    """trace.Trace.runfunc, cmd.Cmd.cmdloop, tempfile, shelve, fileinput: an `if` or a `try` ending
    the finally body gets a RERAISE on each branch; the body comes out once, without a `raise`."""
    for func in (probe.finally_with_branch, probe.finally_skips_on_condition, probe.finally_tail_copied_onto_branches,
                 probe.finally_with_bare_except, probe.finally_with_branch_in_loop,
                 probe.return_through_finally_with_branch):
        source = _round_trips(func)
        assert not re.search(r"^\s*raise$", source, re.M), source  # no re-raise of CPython's copies
    assert _round_trips(probe.finally_with_branch).count("'cleanup'") == 1
    assert _round_trips(probe.finally_tail_copied_onto_branches).count("'end'") == 1


def test_continue_of_the_enclosing_loop():
    for_else = _round_trips(probe.continue_outer_from_for_else)
    assert "else:" in for_else and "__continue_" not in for_else  # reads as the source's for/else
    while_else = _round_trips(probe.continue_outer_from_while_else)
    assert "__continue_" in while_else  # no statement for it: a flag, then `continue` after the inner loop
    _round_trips(probe.continue_outer_from_inner_body)


def test_comprehensions_with_several_clauses_stay_comprehensions():
    source = _round_trips(probe.multi_clause_comprehensions)
    assert "for x in xs for y in ys" in source
    assert "[x for x in xs if x > 0 if x % 2]" in source or "[x for x in xs if x > 0 and x % 2]" in source
    assert "[[y for y in range(x) if y] for x in xs if x < 5]" in source
    assert "for x in xs:" not in source and "__append__" not in source
    conditional = _round_trips(probe.comprehension_conditional_filter)
    assert "for r in rows if (" in conditional and "__append__" not in conditional
    _round_trips(probe.comprehensions_side_by_side)


def _returns_constant():
    return "placeholder"


def test_constants_without_a_literal_form():
    code = _returns_constant.__code__
    with_builtin = code.replace(co_consts=tuple(super if c == "placeholder" else c for c in code.co_consts))
    source = decompile(with_builtin)
    assert "__import__('builtins').super" in source
    namespace: dict = {}
    exec(source, namespace)
    assert namespace["_returns_constant"]() is super
    with_module_object = code.replace(co_consts=tuple(os.path.join if c == "placeholder" else c
                                                       for c in code.co_consts))
    assert "import_module('posixpath').join" in decompile(with_module_object)
    unnamed = code.replace(co_consts=tuple(object() if c == "placeholder" else c for c in code.co_consts))
    with pytest.raises(DecompileError, match="no source form"):
        decompile(unnamed)


def _break_in_except_with_finally(xs):
    log = []
    for x in xs:
        try:
            log.append(10 // x)
        except ZeroDivisionError:
            log.append("z")
            break
        finally:
            log.append("f")
    else:
        log.append("else")
    return log


def _break_through_two_finally_blocks(xs):
    log = []
    for x in xs:
        try:
            try:
                if x == 2:
                    break
                log.append(x)
            finally:
                log.append("i")
        finally:
            log.append("o")
    return log


def _while_true_break_in_finally(n):
    log = []
    while True:
        try:
            n -= 1
            if n < 0:
                break
            log.append(n)
        finally:
            log.append("f")
    return log, n


@pytest.mark.parametrize(("func", "inputs"), [
    (_break_in_except_with_finally, [([1, 0, 2],), ([1, 2],)]),
    (_break_through_two_finally_blocks, [([0, 1, 2, 3],)]),
    (_while_true_break_in_finally, [(3,)]),
])
def test_exits_through_finally_are_right_or_refused(func, inputs):
    """Paths out of try...finally the decompiler cannot express raise DecompileError; they must never
    come out as code that runs the finally body twice (what walking its inlined copy used to do)."""
    source, ok = decompile_or_dis(func)
    if not ok:
        assert "# reason: DecompileError" in source
        return
    namespace = dict(func.__globals__)
    exec(source, namespace)
    for args in inputs:
        assert namespace[func.__name__](*args) == func(*args), source


def test_random_control_flow_is_decompiled_right_or_refused():
    """Loops, try/except/else/finally, with, break/continue/return/raise, nested at random: each
    decompiles to a function that behaves the same on every input, or raises DecompileError."""
    import flowgen

    decompiled = 0
    for seed in range(120):
        namespace = {"Ctx": flowgen.Ctx}
        exec(compile(flowgen.source(seed), f"<flowgen {seed}>", "exec"), namespace)
        source, ok = decompile_or_dis(namespace["f"])
        if not ok:
            continue
        rebuilt = {"Ctx": flowgen.Ctx}
        exec(compile(source, "<decompiled>", "exec"), rebuilt)
        for x in range(9):
            assert flowgen.outcome(rebuilt["f"], x) == flowgen.outcome(namespace["f"], x), \
                f"seed {seed}, x={x}\n{flowgen.source(seed)}\n{source}"
        decompiled += 1
    assert decompiled >= 40  # most of them, not just the easy few

def test_many_range_checks_do_not_blow_up():
    """`if not 0 <= a < n: raise` in a row (uuid.UUID.__init__): each check once, not 2**n walks."""
    checks = "".join(f"    if not 0 <= a{i} < 256:\n        raise ValueError({i})\n" for i in range(16))
    namespace: dict = {}
    exec(f"def f({', '.join(f'a{i}' for i in range(16))}):\n{checks}    return 1\n", namespace)
    source = decompile(namespace["f"])
    again: dict = {}
    exec(source, again)
    assert again["f"](*range(16)) == 1
    with pytest.raises(ValueError, match=r"^15$"):  # the last check's own error
        again["f"](*range(15), 300)


def _nested_finally(log, backup, fail):
    try:
        log.append("body")
    finally:
        try:
            if fail:
                raise OSError("close")
        finally:
            name = log[0]
            if name and not backup:
                try:
                    log.append("unlink")
                except OSError:
                    pass
            log.append("end")


def test_finally_whose_end_is_copied_decompiles_right():
    """fileinput.FileInput.nextfile's shape: CPython copies the finally's tail (and its RERAISE) onto
    each branch; decompiling it used to leave bare `raise`s on the normal path, then was refused."""
    source = decompile(_nested_finally)
    assert not re.search(r"^\s*raise$", source, re.M) and source.count("log.append('end')") == 1, source
    namespace: dict = {}
    exec(source, namespace)
    for backup in (False, True):
        for fail in (False, True):
            assert probe._outcome(namespace["_nested_finally"], ([], backup, fail), {}) == \
                probe._outcome(_nested_finally, ([], backup, fail), {})


def _with_value_left_on_stack(func, var: str):
    """`func` with every store and load of `var` turned into NOPs: the value it unpacked into `var`
    stays on the stack for the next use, as in torch 2.5.1's transformed frames (`x = graph(...)[0]`
    stored, then a jump on the graph's other output)."""
    code = func.__code__
    index, raw = code.co_varnames.index(var), bytearray(code.co_code)
    for ins in dis.get_instructions(code):
        if ins.opname in ("STORE_FAST", "LOAD_FAST") and ins.arg == index:
            raw[ins.offset:ins.offset + 2] = bytes([dis.opmap["NOP"], 0])
        elif ins.opname == "STORE_FAST_STORE_FAST" and ins.arg & 15 == index:  # 3.13: (x, var)
            raw[ins.offset:ins.offset + 2] = bytes([dis.opmap["STORE_FAST"], ins.arg >> 4])
    return types.FunctionType(code.replace(co_code=bytes(raw)), func.__globals__, func.__name__)


def _unpack_then_branch(g):
    x, c = g()
    if c:
        return x
    return -x


def _unpack_call_then_branch(g, h):
    x, c = g()
    h()
    if c:
        return x
    return -x


def test_unpacked_item_used_after_the_others_were_stored():
    func = _with_value_left_on_stack(_unpack_then_branch, "c")
    source = decompile(func)
    namespace: dict = {}
    exec(source, namespace)
    for pair in ((3, True), (3, 0), (2, [1])):
        assert namespace["_unpack_then_branch"](lambda pair=pair: pair) == func(lambda pair=pair: pair), source
    assert func(lambda: (3, 0)) == -3  # the patched code really branches on the unstored item


def test_unpacked_item_used_after_a_statement_is_refused():
    """Writing `x, t = g()` where the item is used would move g() after h()."""
    with pytest.raises(DecompileError):
        decompile(_with_value_left_on_stack(_unpack_call_then_branch, "c"))


def _functions_of(*modules: types.ModuleType) -> list[types.CodeType]:
    codes = []
    for module in modules:
        for value in vars(module).values():
            for fn in [value, *vars(value).values()] if isinstance(value, type) else [value]:
                if isinstance(fn, types.FunctionType) and fn.__module__ == module.__name__:
                    codes.append(fn.__code__)
    return codes


def test_output_does_not_depend_on_memory_layout():
    """The same code decompiles to the same text whatever was allocated before (blocks were once
    hashed by address, and iterating sets of them reordered the output of e.g. shutil.move)."""
    import enum
    import shutil

    codes = _functions_of(enum, re, shutil)
    assert len(codes) > 100
    first = [decompile_or_dis(code) for code in codes]
    padding = []
    for size in (1500, 3000):
        padding.append([object() for _ in range(size)])  # moves where the next blocks are allocated
        assert [decompile_or_dis(code) for code in codes] == first
