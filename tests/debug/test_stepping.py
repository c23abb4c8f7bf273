"""Stepping mode (`dynascope debug`, `dynascope.stepping`): Dynamo's code runs from decompiled files.

Every explain test model must compute exactly what it computes under plain torch.compile, with the
decompiled code installed; pdb, driven through a subprocess, must stop at a line of a decompiled file
with the locals in view and step from the main frame into a resume function.
"""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))

from decompiler import test_decompile_dynamo as dyn  # noqa: E402
from support import explain_helpers as helpers  # noqa: E402
from support import procs  # noqa: E402

import dynascope  # noqa: E402
from dynascope.debug.stepping import Stepping, _compile_function, _decompiled  # noqa: E402
from dynascope.decompiler import equivalence  # noqa: E402

SRC = os.path.join(HERE, "..", "..", "src")
VERIFIED = equivalence.VERSION in equivalence.VERIFIED


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _mlp_calls():
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(3, 8, generator=g),), (torch.randn(3, 8, generator=g),)]


class Fresh:
    """A module built afresh (same seed, same weights) for each of the two runs."""

    def __init__(self, module_type):
        self.module_type = module_type

    def __call__(self):
        torch.manual_seed(0)
        return self.module_type()


def _module_case(module_type, calls):
    return Fresh(module_type), calls, {}


# every model the explain tests compile: (function or module factory, calls, dynamo config)
MODELS = {
    **{name: (fn, calls, config) for name, (fn, calls, config) in dyn.CHAINS.items()},
    "toy_print": (helpers.toy_print, [dyn._inputs(1.0, 20), dyn._inputs(-1.0, 21)], {}),
    "scale": (helpers.scale, [(dyn._tensor(1.0, 22), 2), (dyn._tensor(1.0, 23), 3)], {}),
    "many_live_values": (dyn.many_live_values, [tuple(dyn._tensor(s, 24 + i) for i in range(3)) for s in (1.0, -1.0)],
                         {}),
    "mlp": _module_case(helpers.MLP, _mlp_calls()),
    "branchy_module": _module_case(dyn.Branchy, [(torch.ones(3, 4),), (-torch.ones(3, 4),)]),
    "super_branchy_module": _module_case(dyn.SuperBranchy, [(torch.ones(3, 4),), (-torch.ones(3, 4),)]),
}
FAST = {"toy_example", "print_then_branch"}
# The check refuses every frame here, rightly: the decompiled main frame calls the resume function's
# maker before print() where Dynamo calls print() first, and the resume function's decompiled code
# cannot keep a variable that is both local and free in Dynamo's slot. Dynamo's code runs instead.
NOTHING_INSTALLED = {"loop_in_resume_function"}


def _run(target, calls, capsys):
    compiled = torch.compile(target, backend="eager")
    outputs, printed = [], []
    for args in calls:
        capsys.readouterr()
        outputs.append(dyn._call(compiled, args))
        printed.append(capsys.readouterr().out)
    return outputs, printed


def _same(got, expected):
    """Identical, not close: the installed code must compute bit for bit what Dynamo's computes."""
    if isinstance(expected, (tuple, list)):
        assert type(got) is type(expected) and len(got) == len(expected)
        for g, e in zip(got, expected, strict=True):
            _same(g, e)
    elif isinstance(expected, torch.Tensor):
        assert torch.equal(got, expected) and got.dtype == expected.dtype and got.shape == expected.shape
    else:
        assert got == expected


def _check_model(name, capsys, tmp_path):
    target, calls, config = MODELS[name]
    missing = [key for key in config if not hasattr(torch._dynamo.config, key)]
    if missing:
        pytest.skip(f"torch {torch.__version__} has no {missing}")
    with torch._dynamo.config.patch(**config):
        try:
            expected, printed = _run(target() if isinstance(target, Fresh) else target, calls, capsys)
        except torch._dynamo.exc.InternalTorchDynamoError as exc:  # torch 2.8.0 on try_in_resume_function
            pytest.skip(f"torch {torch.__version__} cannot compile this case itself ({str(exc).splitlines()[0]})")
        torch._dynamo.reset()
        with Stepping(tmp_path / "steps") as stepping:
            got, got_printed = _run(target() if isinstance(target, Fresh) else target, calls, capsys)
    for g, e in zip(got, expected, strict=True):
        _same(g, e)
    assert got_printed == printed
    assert stepping.results, "Dynamo compiled nothing?"
    for result in stepping.results:
        assert os.path.exists(result.path)
        with open(result.path, encoding="utf-8") as fh:
            head = fh.read(400)
        assert ("RUNS in place of Dynamo's bytecode" in head) == result.installed
    if VERIFIED and name not in NOTHING_INSTALLED:
        assert stepping.installed, [r.reason for r in stepping.results]
    elif not VERIFIED:
        assert not stepping.installed
    return stepping


@pytest.mark.parametrize("name", sorted(FAST))
def test_explain_models_compute_the_same_with_decompiled_code(name, capsys, tmp_path):
    stepping = _check_model(name, capsys, tmp_path)
    if VERIFIED:  # these two are fully covered: every frame and resume function runs decompiled
        assert not stepping.kept, [(r.code_name, r.reason) for r in stepping.kept]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(MODELS) - FAST))
def test_every_explain_model_computes_the_same_with_decompiled_code(name, capsys, tmp_path):
    _check_model(name, capsys, tmp_path)


# ---- the equivalence check refuses what is not the same ------------------------------------------


def _dynamo_codes(fn, calls):
    seen = []
    from dynascope import _torch

    remove = _torch.register_replacing_bytecode_hook(lambda code, new: seen.append(new))
    try:
        compiled = torch.compile(fn, backend="eager")
        for args in calls:
            compiled(*args)
    finally:
        remove()
    return seen


MUTATIONS = [  # (text in the decompiled source, replacement): each changes what the code does
    ("b, __t1)", "__t1, b)"),  # arguments swapped
    ("([], [],", "([], [b],"),  # a list with other contents
    ("graph_out_0[0]", "graph_out_0[1]"),  # another graph output
    ("return __resume_at_146_6([], [], b, x)", "return __resume_at_156_7([], [], b, x)"),  # the other branch
    ("if __t1:", "if not __t1:"),  # branch negated
    ("(tmp_2)\n", "(tmp_2)\n    __import_torch_dot__dynamo_dot_utils.record_pregraph_bytecode_exit(tmp_2)\n"),  # twice
]


@pytest.mark.skipif(not VERIFIED, reason="the equivalence check is verified on this Python only where listed")
def test_equivalence_check_refuses_changed_code(capsys):
    codes = _dynamo_codes(helpers.two_breaks, [dyn._inputs(1.0, 0), dyn._inputs(-1.0, 1)])
    assert len(codes) >= 2
    tried = 0
    for new in codes:
        source = _decompiled(new)
        code, why = _compile_function(source, "<test>", new)
        assert why is None and equivalence.check(new, code) is None
        for old, replacement in MUTATIONS:
            if old in source:
                changed, why = _compile_function(source.replace(old, replacement, 1), "<test>", new)
                assert why is None
                assert equivalence.check(new, changed) is not None, (old, replacement)
                tried += 1
    assert tried >= 2  # how many apply depends on the code the installed torch generates


@pytest.mark.skipif(not VERIFIED, reason="the equivalence check is verified on this Python only where listed")
def test_equivalence_check_follows_try_finally_and_refuses_changes_to_it(capsys):
    """A graph break inside `with torch.no_grad()`: Dynamo's code restores grad mode in a try/finally."""
    (new, *_) = _dynamo_codes(dyn.grad_break, [(torch.randn(5, requires_grad=True),)])
    source = _decompiled(new)
    code, why = _compile_function(source, "<test>", new)
    assert why is None and equivalence.check(new, code) is None
    block = re.search(r"( +)try:\n +(__t\d+ = .*)\n +finally:\n +(.*__exit__\(None, None, None\))\n", source)
    assert block, source
    indent, body, exit_call = block.group(1), block.group(2).strip(), block.group(3).strip()
    no_try = source.replace(block.group(0), f"{indent}{body}\n{indent}{exit_call}\n")
    exit_first = source.replace(block.group(0), f"{indent}try:\n{indent}    {exit_call}\n{indent}    {body}\n"
                                                f"{indent}finally:\n{indent}    {exit_call}\n")
    for changed in (no_try, exit_first):
        changed_code, why = _compile_function(changed, "<test>", new)
        assert why is None
        reason = equivalence.check(new, changed_code)
        assert reason is not None and reason.startswith("the decompiled code does not do"), reason


@pytest.mark.skipif(not VERIFIED, reason="the equivalence check is verified on this Python only where listed")
def test_equivalence_check_refuses_what_it_cannot_model(capsys):
    codes = _dynamo_codes(helpers.two_breaks, [dyn._inputs(1.0, 0)])

    def looping(a, b):
        for _ in range(2):
            a = a + b
        return a

    new = codes[0]
    assert "not checked" in equivalence.check(looping.__code__, looping.__code__)
    assert "co_argcount" in equivalence.check(new, looping.__code__.replace(co_argcount=1))


def _kept_list(f, x):
    held = [x]
    f(held)
    return held[0]


def _forgot_list(f, x):
    held = [x]
    f(held)
    return x


def _kept_list_twice(f, x):
    held = [x]
    f(held)
    return held[0]


@pytest.mark.skipif(not VERIFIED, reason="the equivalence check is verified on this Python only where listed")
def test_a_list_handed_to_a_call_is_no_longer_known():
    """f may change the list: after the call, held[0] is not x any more, as far as anyone knows."""
    assert equivalence.check(_kept_list.__code__, _kept_list_twice.__code__) is None
    assert equivalence.check(_kept_list.__code__, _forgot_list.__code__) is not None


def test_unverified_python_installs_nothing(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(equivalence, "VERIFIED", set())
    with Stepping(tmp_path) as stepping:
        compiled = torch.compile(helpers.two_breaks, backend="eager")
        compiled(*dyn._inputs(1.0, 0))
    assert stepping.results and not stepping.installed
    assert all("not verified on Python" in r.reason for r in stepping.results)
    assert stepping.notes and "Dynamo's own code runs everywhere" in stepping.notes[0]


# ---- debuggers ------------------------------------------------------------------------------------


@pytest.mark.skipif(not VERIFIED, reason="stepping installs decompiled code only on verified Pythons")
def test_a_settrace_debugger_sees_the_decompiled_lines_with_their_locals(tmp_path, capsys):
    """What an IDE's debugger sees (they are built on sys.settrace): line events in the written files."""
    out = str(tmp_path)
    seen = []

    def tracer(frame, event, arg):
        if not frame.f_code.co_filename.startswith(out):
            return None
        if event == "line":
            seen.append((os.path.basename(frame.f_code.co_filename), frame.f_lineno, dict(frame.f_locals)))
        return tracer

    with Stepping(tmp_path):
        compiled = torch.compile(helpers.two_breaks, backend="eager")
        a, b = torch.full((3,), 2.0), -torch.ones(3)
        compiled(a, b)
        sys.settrace(tracer)
        try:
            compiled(a, b)
        finally:
            sys.settrace(None)
    files = {name for name, _, _ in seen}
    assert "two_breaks_1.py" in files and any(f.startswith("torch_dynamo_resume_in_two_breaks_at_") for f in files)
    main_line = _line_of(tmp_path / "two_breaks_1.py", "__compiled_fn_")
    (here,) = [loc for name, line, loc in seen if name == "two_breaks_1.py" and line == main_line]
    assert here["a"] is a and here["b"] is b
    in_resume = [loc for name, _, loc in seen if name.startswith("torch_dynamo_resume_in_two_breaks_at_") and "x" in loc]
    assert torch.equal(in_resume[0]["x"], a / (a.abs() + 1))


# ---- pdb, through a subprocess --------------------------------------------------------------------

SCRIPT = textwrap.dedent('''
    import sys
    import torch
    import dynascope


    def two_breaks(a, b):
        x = a / (torch.abs(a) + 1)
        print("woo")
        if b.sum() < 0:
            b = b * -1
        return x * b


    if __name__ == "__main__":
        with dynascope.stepping(sys.argv[1]) as steps:
            f = torch.compile(two_breaks, backend="eager")
            f(torch.ones(3), -torch.ones(3))  # compiles every frame and resume function
            print("result", f(torch.full((3,), 2.0), -torch.ones(3)))
        print("installed", len(steps.installed), "of", len(steps.results))
''')


def _python(*args, stdin=None, cwd=None):
    env = dict(os.environ, PYTHONPATH=os.path.abspath(SRC), NO_COLOR="1", COLUMNS="200")
    return procs.run([sys.executable, *args], check=False, input=stdin, capture_output=True, text=True, cwd=cwd,
                     env=env, timeout=300)  # fmt: skip


def _line_of(path, text):
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if text in line:
                return number
    raise AssertionError(f"{text!r} not in {path}")


def _files_in_process(script, out):
    """Write the decompiled files the script's run will write, here (torch is imported already): the
    script's function, compiled and run the same way under stepping."""
    namespace = {"__name__": "not_main"}
    exec(compile(script.read_text(), str(script), "exec"), namespace)
    with Stepping(out) as stepping:
        f = torch.compile(namespace["two_breaks"], backend="eager")
        f(torch.ones(3), -torch.ones(3))
    assert len(stepping.installed) == 3, [r.reason for r in stepping.results]
    return out / "two_breaks_1.py", out / "torch_dynamo_resume_in_two_breaks_at_9_1.py"


@pytest.mark.skipif(not VERIFIED, reason="stepping installs decompiled code only on verified Pythons")
def test_pdb_stops_in_the_decompiled_file_and_steps_into_the_resume_function(tmp_path, capsys):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    out = tmp_path / "steps"
    main, resume = _files_in_process(script, tmp_path / "lines")  # where the lines are
    graph_line = _line_of(main, "__compiled_fn_")  # the call of the compiled graph
    resume_graph = _line_of(resume, "__compiled_fn_")
    main, resume = out / main.name, out / resume.name
    commands = "\n".join([
        "c",  # a first run writes the files (pdb can only set breakpoints in files that exist) and restarts
        f"b {main}:{graph_line}", "c", "c",  # the first call stops too: go on to the second
        "p a", "n", "p graph_out_0[0]",
        f"b {resume}:{resume_graph}", "c",  # on into the resume function's decompiled file
        "p b", "p x", "c", "q",
    ]) + "\n"
    run = _python("-m", "pdb", str(script), str(out), stdin=commands)
    text = run.stdout
    assert "installed 3 of 3" in text
    assert f"{main}({graph_line})two_breaks()" in text
    assert "tensor([2., 2., 2.])" in text  # p a, on the second call
    assert "(Pdb) tensor([0.6667, 0.6667, 0.6667])" in text  # the graph's output, 2 / (2 + 1)
    assert f"> {resume}({resume_graph})torch_dynamo_resume_in_two_breaks_at_9()" in text
    assert "(Pdb) tensor([-1., -1., -1.])\n(Pdb) tensor([0.6667, 0.6667, 0.6667])" in text  # p b, p x there
    assert "result tensor([0.6667, 0.6667, 0.6667])" in text


@pytest.mark.skipif(not VERIFIED, reason="stepping installs decompiled code only on verified Pythons")
def test_cli_debug_keeps_a_breakpoint_line_added_to_the_file_and_steps_into_resume(tmp_path, capsys):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT.replace("with dynascope.stepping(sys.argv[1]) as steps:", "if True:")
                      .replace('print("installed", len(steps.installed), "of", len(steps.results))', ""))
    out = tmp_path / "steps"
    main, resume = _files_in_process(script, out)  # as an earlier `dynascope debug` run would leave them
    lines = main.read_text().splitlines()
    at = _line_of(main, "__compiled_fn_")
    lines.insert(at, "    breakpoint()")  # the user's own breakpoint, after the graph call
    back = _line_of(main, "return __resume_at_") + 1

    main.write_text("\n".join(lines) + "\n")
    run = _python("-m", "dynascope.cli", "debug", "--out", str(out), "--json", str(tmp_path / "d.json"),
                  str(script), cwd=tmp_path, stdin=f"p graph_out_0[0]\nuntil {back}\ns\np b\nc\nc\n")
    assert run.returncode == 0, run.stderr
    stop = at + 1 if sys.version_info >= (3, 13) else at + 2  # 3.13's breakpoint() stops on its own line
    assert f"{main}({stop})two_breaks()" in run.stdout  # at breakpoint() (3.13+), or at the line after it
    assert "tensor([0.5000, 0.5000, 0.5000])" in run.stdout
    assert f"--Call--\n> {resume}(" in run.stdout  # `s` went straight into the resume function
    assert "(Pdb) tensor([-1., -1., -1.])" in run.stdout  # p b, there
    assert "breakpoint()" in main.read_text()  # kept when the file was rewritten
    assert "3 compiled code objects written to" in run.stderr and "3 run as decompiled source" in run.stderr
    files = json.loads((tmp_path / "d.json").read_text())["files"]
    assert [f["installed"] for f in files] == [True] * 3 and files[0]["breakpoints"] == [at + 1]


def test_cli_lists_debug():
    from dynascope.cli import COMMANDS

    assert COMMANDS["debug"][0] == "dynascope.cli.debug"
    assert dynascope.stepping is not None
