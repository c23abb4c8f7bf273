"""The recompile guard: no_recompiles() stops at the first recompilation with the failed guard, its old
and new value, the user line behind the guard and a suggestion; recompiles(fn) lists them afterwards."""

from __future__ import annotations

import inspect
import os
import sys

import pytest
import torch
from support import procs

import dynascope
from dynascope import _torch

HERE = os.path.dirname(os.path.abspath(__file__))
GUARD_LINES = _torch.torch_at_least(2, 9)  # torch records the user line behind each guard from 2.9


def line_of(fn, text: str) -> str:
    lines, first = inspect.getsourcelines(fn)
    return f"test_recompiles.py:{first + next(i for i, line in enumerate(lines) if text in line)}"


@pytest.fixture(autouse=True)
def fresh():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def scaled(x, n):
    y = x * n
    return y + 1


def shaped(x):
    return torch.sin(x) * 2


def test_a_changing_python_constant_stops_with_the_guard_values_and_line():
    f = torch.compile(scaled, backend="eager")

    def calls():
        with dynascope.no_recompiles():
            f(torch.ones(4), 2)  # the first compile is no recompile
            f(torch.ones(4), 2)
            f(torch.ones(4), 3)

    with pytest.raises(dynascope.RecompileError) as caught:
        calls()
    fact = caught.value.fact
    assert (fact.function, fact.compile_id, fact.subject, fact.old, fact.new) == ("scaled", "0/0", "n", "2", "3")
    assert fact.guard == "n == 2" and "torch.tensor(n)" in fact.suggestion
    if GUARD_LINES:
        assert fact.source == line_of(scaled, "y = x * n") and fact.code == "y = x * n"
        assert f"The guard comes from {fact.source}" in str(caught.value)


def test_a_changing_shape_stops_with_the_dimension_and_line():
    f = torch.compile(shaped, backend="eager")
    f(torch.ones(4, 2))
    with pytest.raises(dynascope.RecompileError) as caught, dynascope.no_recompiles():
        f(torch.ones(8, 2))
    fact = caught.value.fact
    assert (fact.subject, fact.old, fact.new) == ("x.size(0)", "4", "8")
    assert "size mismatch at index 0" in fact.guard and "mark_dynamic(x, 0)" in fact.suggestion
    if GUARD_LINES:
        assert fact.source == line_of(shaped, "torch.sin(x)")


def test_recompiles_lists_them_afterwards():
    f = torch.compile(scaled, backend="eager")
    f(torch.ones(4), 2)
    f(torch.ones(4), 3)
    g = torch.compile(shaped, backend="eager")
    g(torch.ones(4, 2))
    g(torch.ones(8, 2))
    if not _torch.torch_at_least(2, 8):  # torch keeps no recompile reasons: one line says so
        with pytest.raises(dynascope.DynascopeError, match="recompile reasons torch keeps"):
            dynascope.recompiles(scaled)
        return
    (constant,) = dynascope.recompiles(scaled)
    # the second compile treats n as dynamic: its entry no longer pins one value
    assert (constant.guard, constant.old) == ("n == 2", "2")
    assert constant.new in ("any int (now dynamic)", "any value of its type (now dynamic)")  # 2.13+, 2.8
    (shape,) = dynascope.recompiles(shaped)
    assert (shape.subject, shape.old, shape.new) == ("x.size(0)", "4", "8")
    if GUARD_LINES:
        assert constant.source == line_of(scaled, "y = x * n") and shape.source == line_of(shaped, "torch.sin")
    assert dynascope.recompiles(f) == [constant]  # the compiled function or the original: the same code


def test_other_errors_pass_through():
    f = torch.compile(scaled, backend="eager")

    def calls():
        with dynascope.no_recompiles():
            f(torch.ones(2), 2)
            return 1 / 0

    with pytest.raises(ZeroDivisionError):
        calls()


def test_run_no_recompiles_stops_the_script_with_the_reason(tmp_path):
    script = os.path.join(HERE, "scripts", "recompiling.py")
    done = procs.run([sys.executable, "-m", "dynascope.cli", "run", "--no-recompiles", "--no-html",
                           "--out", str(tmp_path), script], capture_output=True, text=True, timeout=600,
                          check=False)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "recompiling.py stopped: scale (recompiling.py:6) recompiles: factor == 2" in done.stderr
    assert "factor was 2, now 5" in done.stderr and "Traceback" not in done.stderr
    assert list(tmp_path.glob("recompiling-*.pfw.gz"))  # the trace is written all the same
