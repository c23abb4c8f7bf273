"""The seed 004 toy example: a data-dependent branch gives Dynamo three frames (main + 2 resumes)."""

import json
import re

import pytest
import torch
from support.explain_helpers import assert_backend, line_of, toy_example

import dynascope
from dynascope import _torch
from dynascope.explain import Explanation, observe
from dynascope.explain.api import explain


def run_toy(backend="eager", n=100):
    opt = torch.compile(toy_example, backend=backend)
    torch.manual_seed(0)
    for _ in range(n):
        opt(torch.randn(10), torch.randn(10))
    return opt


def test_toy_example_three_frames_with_resume_markers():
    opt = run_toy()
    expl = explain(opt)
    text = str(expl)
    assert text.startswith("This function is optimized by Dynamo. It has 1 cache entry.")
    (entry,) = expl.cache_entries
    assert entry.compile_id == "0/0"
    assert_backend(expl, entry, "eager")
    # one subgraph: abs, add, div, sum, lt
    (sg,) = entry.subgraphs
    assert re.fullmatch(r"__compiled_fn_\d+", sg.name)  # the number is process-wide: test order sets it
    assert sg.op_count == 5
    assert "torch.abs(l_a_)" in sg.fx_code
    # two resume functions (one per branch), both resuming on the `if` line, each with its own entry
    if_line = line_of(toy_example, "if b.sum() < 0:")
    assert len(entry.resume_functions) == 2
    ids = set()
    for rf in entry.resume_functions:
        assert rf.name.startswith("__resume_at_")
        assert rf.line == if_line
        marked = [ln for ln in rf.source.splitlines() if "<== resume in this line" in ln]
        assert marked == ["    if b.sum() < 0:  <== resume in this line"]
        assert rf.explanation is not None and rf.explanation.kind == "resume"
        (sub,) = rf.explanation.cache_entries
        ids.add(sub.compile_id)
        assert sub.subgraphs and sub.subgraphs[0].op_count in (1, 2)
    assert ids == {"1/0", "2/0"}
    # which branch each one is: the line it continues with
    assert sorted(rf.continues_at.code for rf in entry.resume_functions) == ["b = b * -1", "return x * b"]
    assert expl.all_entries()[0].compile_id == "0/0"
    assert len(expl.all_entries()) == 3
    # the same explanation whichever object the user passes
    assert [e.compile_id for e in explain(toy_example).all_entries()] == [e.compile_id for e in expl.all_entries()]
    assert dynascope.explain(opt).cache_entries[0].compile_id == "0/0"


def test_report_lines_carry_their_roles_for_the_terminal():
    from dynascope.render.explanation_text import HEADING, NOTE, RESUME, explanation_lines

    expl = explain(run_toy(n=20))
    lines = explanation_lines(expl)
    assert lines.text() == str(expl)
    headings = [text.lstrip(" |") for text, role in lines.rows if role == HEADING]
    assert headings[0] == "This function is optimized by Dynamo. It has 1 cache entry."
    for start in ("Cache entry 1 (compile id 0/0", "Guards (", "Transformed code", "Resume function 2",
                  "This resume function is optimized", "Compile times ("):
        assert any(h.startswith(start) for h in headings), start
    marked = [text for text, role in lines.rows if role == RESUME]
    assert len(marked) == 2 and all(t.endswith("if b.sum() < 0:  <== resume in this line") for t in marked)
    assert all(text.lstrip(" |").startswith("note:") for text, role in lines.rows if role == NOTE)


def test_toy_guards_are_readable_and_grouped():
    expl = explain(run_toy(n=5))
    entry = expl.cache_entries[0]
    groups = {g.subject: g for g in entry.guards}
    assert list(groups)[:3] == ["global state", "a", "b"]
    a_checks = [g.text for g in groups["a"].guards]
    assert "a: Tensor, dtype float32, shape [10], stride [1], requires_grad=False, device cpu" in a_checks
    tm = next(g for g in groups["a"].guards if g.kind == "TENSOR_MATCH")
    assert tm.raw.startswith("check_tensor(L['a'], Tensor, DispatchKeySet(")
    # ID_MATCH text names the object's type from torch 2.10 (as its repr until 2.12)
    kind = " (module)" if _torch.torch_at_least(2, 10) else ""
    assert groups["torch"].guards[0].text == "torch is the same object as at compile time" + kind
    state = " ".join(g.text for g in groups["global state"].guards)
    assert "against {" not in state and "___check" not in state
    if _torch.torch_at_least(2, 11):  # before, the guard text does not say what the state was
        assert "grad_mode=True" in state
    # no torch pseudo-code leaks into the readable text
    for group in entry.guards:
        for g in group.guards:
            assert "L['" not in g.text and "___check" not in g.text, g.text


@pytest.mark.skipif(not _torch.torch_at_least(2, 9), reason="torch before 2.9 does not record the user line that installed an input's guards")
def test_guards_name_the_user_line_that_installed_them():
    expl = explain(run_toy(n=5))
    a_group = next(g for g in expl.cache_entries[0].guards if g.subject == "a")
    tm = next(g for g in a_group.guards if g.kind == "TENSOR_MATCH")
    assert tm.user_line.line == line_of(toy_example, "x = a / (torch.abs(a) + 1)")
    assert tm.user_line.code == "x = a / (torch.abs(a) + 1)"
    assert tm.user_line.file == toy_example.__code__.co_filename
    assert not [n for n in expl.notes if "user lines" in n]


@pytest.mark.skipif(_torch.torch_at_least(2, 9), reason="the note is for torch before 2.9 only")
def test_old_torch_says_once_that_guards_have_no_user_lines():
    expl = explain(run_toy(n=5))
    notes = [n for n in expl.notes if "the user lines that installed guards" in n]
    assert notes == [(f"the user lines that installed guards: not available on torch {torch.__version__} "
                      "(torch 2.13.0 has them); everything else works")]


def test_explanation_round_trips_through_json():
    with observe():
        opt = run_toy(n=20)
    expl = explain(opt)
    data = json.loads(expl.to_json())
    assert data["function"]["name"] == "toy_example"
    assert data["cache_entries"][0]["resume_functions"][0]["explanation"]["cache_entries"][0]["compile_id"] in ("1/0", "2/0")
    back = Explanation.from_dict(data)
    assert back == expl
    assert str(back) == str(expl)
    assert back.graph_breaks[0].reason == "Data-dependent branching"


def test_only_one_branch_ran_leaves_one_resume_uncompiled():
    opt = torch.compile(toy_example, backend="eager")
    b = torch.ones(10)  # sum > 0: the `if` is never taken
    opt(torch.randn(10), b)
    entry = explain(opt).cache_entries[0]
    compiled = [rf for rf in entry.resume_functions if rf.explanation is not None]
    assert len(entry.resume_functions) == 2 and len(compiled) == 1
    assert "not compiled yet" in str(explain(opt))


@pytest.mark.slow
def test_toy_example_inductor():
    with observe() as obs:
        opt = run_toy(backend="inductor", n=10)
    expl = explain(opt)
    assert_backend(expl, expl.cache_entries[0], "inductor")
    assert len(expl.all_entries()) == 3
    sg = expl.cache_entries[0].subgraphs[0]
    assert sg.fx_code and "torch.abs" in sg.fx_code  # Dynamo's graph, kept by the observer
    assert sg.op_count == 5
    ct = next(c for c in obs.compile_times if c.compile_id == "0/0")
    assert ct.backend_s > 0 and ct.total_s >= ct.backend_s
    if ct.aot_s is not None:  # cold caches: AOT autograd and inductor ran and are timed apart
        assert ct.inductor_s is not None and 0 < ct.inductor_s <= ct.backend_s
        assert abs(ct.dynamo_s + ct.aot_s + ct.backend_s - ct.total_s) < 1e-6


def test_nested_resume_functions_two_breaks():
    from support.explain_helpers import two_breaks

    with observe() as obs:
        opt = torch.compile(two_breaks, backend="eager")
        opt(torch.randn(10), -torch.ones(10))
    expl = explain(opt)
    (rf,) = expl.cache_entries[0].resume_functions  # after print
    assert rf.line == line_of(two_breaks, 'print("woo")')
    assert rf.continues_at.code == 'print("woo")'  # right after the call, still on its line
    inner = rf.explanation.cache_entries[0]
    assert len(inner.resume_functions) == 2  # the data-dependent branch, inside the resume function
    taken = [r for r in inner.resume_functions if r.explanation is not None]
    assert len(taken) == 1 and taken[0].continues_at.code == "b = b * -1"
    assert "<== resume in this line" in taken[0].source.splitlines()[3]
    assert len(expl.all_entries()) == 3
    assert sorted(gb.reason for gb in obs.graph_breaks) == ["Data-dependent branching", "Failed to trace builtin operator"]
