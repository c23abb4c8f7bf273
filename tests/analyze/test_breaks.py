"""The graph-break cost join (analyze/breaks.py, analyze/costs.py) on traces written event by event, so
every number is known: regions, nesting, warm-up calls, fallbacks, frames an exception left open.

The events are the lines dynascope's writer gives (docs/trace-format.md, "Frames and graph breaks"):
probes are instant `dynamo.frame` / `dynamo.call` events naming their OH record, graph calls
`dynamo.graph` events naming theirs. Torch-free."""

from __future__ import annotations

import json

import polars as pl
import pytest
from support.frame_trace import FILE, Trace

import dynascope
from dynascope.analyze.fixes import break_fix, recompile_fix


def calls_with_one_break(helper_us: int, calls: int = 3) -> Trace:
    """A trace of `calls` calls 10 ms apart, each with one break whose helper runs `helper_us`."""
    tr = Trace()
    for k in range(calls):
        tr.one_break_call(10_000 * k, helper_us=helper_us)
    return tr


def summary_of(path, explanation=None):
    return dynascope.summarize_files([str(path)], explanation=explanation)


def test_a_breaks_cost_is_the_eager_time_between_the_graphs_it_separates(tmp_path):
    tr = Trace()
    for k in range(4):  # the first call is a warm-up (each cache entry's first run): left out
        tr.one_break_call(10_000 * k, helper_us=1000)
    s = summary_of(tr.write(tmp_path))
    [row] = s.graph_breaks.to_dicts()
    assert row["source"] == "model.py:12" and row["code"] == "x = helper(x)"
    assert row["calls"] == 3 and row["warmup_calls"] == 1
    assert row["total_us"] == 3 * 1010  # from graph 1's end (t+30) to graph 2's start (t+1040)
    assert row["per_call_us"] == 1010 and row["per_hit_us"] == 1010
    assert row["compile_ids"] == ["0/0"] and row["measurable"]
    assert "helper is marked torch.compiler.disable" in row["fix"]
    [fn] = s.compiled_functions.to_dicts()
    assert fn["calls"] == 4 and fn["per_call_us"] == 1070
    # the parts of a call add up to it: graphs 20, the break 1010, the rest (guards, prologues) 40
    assert (fn["graph_us"], fn["break_us"], fn["fallback_us"], fn["overhead_us"]) == (20, 1010, 0, 40)
    entries = {e["compile_id"]: e for e in s.cache_entries.to_dicts()}
    assert entries["0/0"]["kind"] == "function" and entries["1/0"]["kind"] == "resume function"
    assert entries["1/0"]["function"] == "M.forward (after line 12)"
    assert entries["1/0"]["calls"] == 4 and entries["1/0"]["per_call_us"] == 30  # its enter to its exit


def test_per_step_cost_needs_steps_and_share_is_of_the_call(tmp_path):
    tr = calls_with_one_break(helper_us=500)
    [row] = summary_of(tr.write(tmp_path)).graph_breaks.to_dicts()
    assert row["per_step_us"] is None  # no optimizer steps, no regions: no steps
    assert row["share"] == pytest.approx(510 / 570)


def test_compile_time_inside_a_region_is_not_its_cost_and_makes_the_call_a_warm_up(tmp_path):
    tr = Trace()
    tr.one_break_call(0, helper_us=1000)
    tr.compile(100, 500, "1/0")  # the first run compiles the resume function inside the break's region
    for k in range(1, 3):
        tr.one_break_call(10_000 * k, helper_us=1000)
    [row] = summary_of(tr.write(tmp_path)).graph_breaks.to_dicts()
    assert row["calls"] == 2 and row["total_us"] == 2 * 1010
    assert row["warmup_us"] == 1010 - 500  # the compile is compile time, not the break's


def test_a_break_only_in_warm_up_calls_says_so(tmp_path):
    tr = Trace()
    tr.one_break_call(0, helper_us=1000)
    [row] = summary_of(tr.write(tmp_path)).graph_breaks.to_dicts()
    assert row["warmup_only"] and row["calls"] == 1 and row["total_us"] == 1010
    assert "warm-up" in row["note"]


def test_two_breaks_are_ranked_by_cost(tmp_path):
    tr = Trace()
    for k in range(3):
        t = 20_000 * k
        tr.call("enter", t)
        tr.frame("enter", t + 5, "0/0", breaks=1, break_at=12, reason="cheap", code="a()")
        tr.graph(t + 10, 10, "0/0", 1)
        tr.frame("enter", t + 120, "1/0", line=12, resume=1, breaks=1, break_at=14, reason="costly", code="b()")
        tr.graph(t + 130, 10, "1/0", 2)
        tr.frame("enter", t + 5140, "2/0", line=14, resume=1)
        tr.graph(t + 5150, 10, "2/0", 3)
        tr.frame("exit", t + 5170, "2/0", line=14, resume=1)
        tr.frame("exit", t + 5171, "1/0", line=12, resume=1, breaks=1, break_at=14, reason="costly", code="b()")
        tr.frame("exit", t + 5172, "0/0", breaks=1, break_at=12, reason="cheap", code="a()")
        tr.call("exit", t + 5180)
    rows = summary_of(tr.write(tmp_path)).graph_breaks.to_dicts()
    assert [(r["source"], r["per_call_us"]) for r in rows] == [("model.py:14", 5010), ("model.py:12", 110)]
    assert [r["function"] for r in rows] == ["M.forward (after line 12)", "M.forward"]  # resume functions as said


def test_a_break_inside_an_inlined_function_is_one_hit_charged_to_its_line(tmp_path):
    """A break in a submodule Dynamo inlined splits the caller at the call (frame 0/0) and the submodule's
    own frame (1/0) at the line itself: both regions are the same break, one hit, their eager time summed."""
    tr = Trace()
    why = {"breaks": 1, "break_at": 30, "reason": "Failed to trace builtin operator", "code": 'print("x")'}
    for k in range(3):
        t = 10_000 * k
        tr.call("enter", t)
        tr.frame("enter", t + 5, "0/0", **why)
        tr.graph(t + 10, 10, "0/0", 1)
        tr.frame("enter", t + 40, "1/0", function="inner", line=28, **why)  # the submodule, called at the split
        tr.graph(t + 50, 10, "1/0", 2)
        tr.frame("enter", t + 100, "2/0", function="inner", line=30, resume=1)
        tr.graph(t + 110, 10, "2/0", 3)
        tr.frame("exit", t + 125, "2/0", function="inner", line=30, resume=1)
        tr.frame("exit", t + 126, "1/0", function="inner", line=28, **why)
        tr.frame("enter", t + 140, "3/0", line=11, resume=1)
        tr.graph(t + 150, 10, "3/0", 4)
        tr.frame("exit", t + 165, "3/0", line=11, resume=1)
        tr.frame("exit", t + 166, "0/0", **why)
        tr.call("exit", t + 170)
    [row] = summary_of(tr.write(tmp_path)).graph_breaks.to_dicts()
    assert row["calls"] == 2 and row["compile_ids"] == ["0/0", "1/0"]
    # 0/0's region 20..150 less graphs 2 and 3 (20) = 110, all of it this break's (1/0's 60..110 included)
    assert row["total_us"] == 2 * 110


def test_a_function_dynamo_ran_eagerly_is_a_fallback_charged_with_its_eager_time(tmp_path):
    tr = Trace()
    for k in range(3):  # M.forward ran eagerly; it called a compiled block (frame 5/0) twice
        t = 10_000 * k
        tr.call("enter", t)
        for start in (100, 400):
            tr.frame("enter", t + start, "5/0", function="block", line=40)
            tr.graph(t + start + 10, 50, "5/0", 9)
            tr.frame("exit", t + start + 100, "5/0", function="block", line=40)
        tr.call("exit", t + 1000)
    explanation = {
        "compile_times": [{"compile_id": "0/0", "function": "forward", "file": FILE, "line": 10, "status": "failed"}],
        "graph_breaks": [{"reason": "x (the whole function fell back to eager: graph break in loop)", "file": FILE,
                          "line": 41, "function": "block", "compile_ids": ["0/0"], "count": 1}],
    }
    s = summary_of(tr.write(tmp_path), explanation=explanation)
    [row] = s.graph_breaks.to_dicts()
    assert row["kind"] == "eager function" and row["source"] == "model.py:41"
    assert row["calls"] == 2 and row["per_call_us"] == 1000 - 200  # outside the two compiled block runs
    assert "loop" in row["fix"]
    [fn] = s.compiled_functions.to_dicts()
    assert (fn["graph_us"], fn["fallback_us"], fn["overhead_us"]) == (100, 800, 100)
    without = summary_of(tr.write(tmp_path)).graph_breaks.to_dicts()[0]
    assert without["source"] == "model.py:10" and "ran this function eagerly" in without["reason"]


def test_a_frame_an_exception_left_open_ends_with_its_call(tmp_path):
    tr = Trace()
    tr.one_break_call(0, helper_us=100)
    tr.call("enter", 5_000)
    # the helper raised: no resume function, no return probe; the call's wrapper records its end
    tr.frame("enter", 5_010, "0/0", breaks=1, break_at=12, reason="Skip calling `torch.compiler.disable()`d function",
             code="x = helper(x)")
    tr.graph(5_020, 10, "0/0", 1)
    tr.call("exit", 5_100)
    for k in range(1, 4):
        tr.one_break_call(10_000 * k, helper_us=100)
    s = summary_of(tr.write(tmp_path))
    [row] = s.graph_breaks.to_dicts()
    assert row["calls"] == 4 and row["total_us"] == 3 * 110 + 70  # the raising hit ran to the call's end
    assert s.compiled_functions.to_dicts()[0]["calls"] == 5


def test_without_call_probes_a_raising_frame_ends_where_it_runs_again(tmp_path):
    """Frames compiled while no wrapper times the calls (torch.compile ran before the session): a frame
    that raised stays open until the same frame starts again."""
    tr = Trace()
    for k in range(4):
        t = 10_000 * k
        tr.frame("enter", t, "0/0", breaks=1, break_at=12, reason="r", code="x = helper(x)")
        tr.graph(t + 10, 10, "0/0", 1)
        if k == 1:
            continue  # raised in the helper
        tr.frame("enter", t + 520, "1/0", line=12, resume=1)
        tr.graph(t + 530, 10, "1/0", 2)
        tr.frame("exit", t + 545, "1/0", line=12, resume=1)
        tr.frame("exit", t + 550, "0/0", breaks=1, break_at=12, reason="r", code="x = helper(x)")
    s = summary_of(tr.write(tmp_path))
    [row] = s.graph_breaks.to_dicts()
    assert row["calls"] == 3 and row["per_hit_us"] == pytest.approx((2 * 510 + 10_000 - 20) / 3)
    assert s.compiled_functions.to_dicts()[0]["function"] == "M.forward"


def test_threads_with_compiles_but_no_graph_calls_are_fine(tmp_path):
    """Inductor compiles on threads of its own: compile events, no graph calls, no probes."""
    tr = calls_with_one_break(helper_us=100)
    helper = Trace(pid=7)
    helper.lines = []
    helper.compile(500, 100, "0/0")
    tr.lines += [line.replace('"tid": 7', '"tid": 8') for line in helper.lines]
    s = summary_of(tr.write(tmp_path))
    assert s.graph_breaks.to_dicts()[0]["calls"] == 2


def test_a_trace_cut_inside_a_call_leaves_that_call_out(tmp_path):
    tr = calls_with_one_break(helper_us=100)
    tr.call("enter", 50_000)
    tr.frame("enter", 50_010, "0/0")
    s = summary_of(tr.write(tmp_path))
    assert s.compiled_functions.to_dicts()[0]["calls"] == 3


def test_breaks_the_trace_never_saw_run_are_listed_with_no_cost(tmp_path):
    tr = calls_with_one_break(helper_us=100)
    explanation = {"graph_breaks": [
        {"reason": "Data-dependent branching", "file": FILE, "line": 50, "function": "forward",
         "compile_ids": ["7/0"], "count": 1, "detail": "Hint: use torch.cond"},
    ]}
    rows = summary_of(tr.write(tmp_path), explanation=explanation).graph_breaks.to_dicts()
    unseen = next(r for r in rows if r["source"] == "model.py:50")
    assert unseen["calls"] == 0 and unseen["total_us"] == 0 and not unseen["measurable"]
    assert unseen["note"] == "not seen running in the trace"


def test_auto_takes_the_explanation_beside_the_trace(tmp_path):
    tr = calls_with_one_break(helper_us=100)
    path = tr.write(tmp_path)
    assert all(r["source"] != "model.py:50" for r in summary_of(path, "auto").graph_breaks.to_dicts())
    (tmp_path / "explanation.json").write_text(json.dumps({"graph_breaks": [
        {"reason": "Data-dependent branching", "file": FILE, "line": 50, "function": "forward",
         "compile_ids": ["7/0"], "count": 1}]}))
    sources = [r["source"] for r in summary_of(path, "auto").graph_breaks.to_dicts()]
    assert sources == ["model.py:12", "model.py:50"]
    assert [r["source"] for r in summary_of(tmp_path, "auto").graph_breaks.to_dicts()] == sources


def test_a_frame_read_whole_gives_the_same_cost_tables_as_files_read_one_by_one(tmp_path):
    tr = Trace()
    for k in range(4):
        tr.one_break_call(10_000 * k, helper_us=300 + 100 * k)
    tr.compile(50_000, 700, "0/1")
    path = tr.write(tmp_path)
    whole = dynascope.summarize(dynascope.read_trace(str(path)))
    by_file = summary_of(path)
    for table in ("graph_breaks", "compiled_functions", "cache_entries", "recompiles"):
        assert getattr(whole, table).equals(getattr(by_file, table)), table
    assert by_file.graph_breaks["total_us"].to_list() == [410 + 510 + 610]  # the first call is a warm-up


def test_recompiles_are_charged_to_the_guard_line_with_their_compile_time(tmp_path):
    tr = Trace()
    tr.compile(0, 4000, "0/0")
    tr.compile(10_000, 3000, "0/1")
    tr.compile(20_000, 2500, "0/2")
    entry = {"compile_id": "0/0", "guards": [{"subject": "n", "guards": [
        {"kind": "EQUALS_MATCH", "text": "n == 1", "user_line": {"file": FILE, "line": 22, "code": "y = x * n"}}]}]}
    explanation = {
        "explanations": [{"cache_entries": [entry]}],
        "recompiles": [
            {"function": "scale", "file": FILE, "line": 21, "compile_id": "0/1", "reason": "guard failed: n == 1",
             "failures": [{"compile_id": "0/0", "reason": "guard failed: n == 1", "subject": "n"}]},
            {"function": "scale", "file": FILE, "line": 21, "compile_id": "0/2", "reason": "guard failed: n == 2",
             "failures": [{"compile_id": "0/0", "reason": "guard failed: n == 2", "subject": "n"}]},
        ],
    }
    [row] = summary_of(tr.write(tmp_path), explanation=explanation).recompiles.to_dicts()
    assert row["source"] == "model.py:22" and row["code"] == "y = x * n"
    assert row["calls"] == 2 and row["total_us"] == 5500 and row["compile_ids"] == ["0/1", "0/2"]
    assert "dynamic=True" in row["fix"]
    [bare] = summary_of(tr.write(tmp_path)).recompiles.to_dicts()  # no explanation: by compile id alone
    assert bare["calls"] == 2 and bare["total_us"] == 5500 and "explanation" in bare["reason"]


def test_a_recompile_whose_guard_names_only_a_library_line_is_charged_to_the_users_function(tmp_path):
    """Where the explanation could not trace torch.nn's line back to the user's (no `library_file`), the row
    names the recompiled user function, torch's line beside it; --library-frames keeps torch's."""
    tr = Trace()
    tr.compile(0, 4000, "0/0")
    tr.compile(10_000, 3000, "0/1")
    entry = {"compile_id": "0/0", "guards": [{"subject": "x", "guards": [
        {"kind": "TENSOR_MATCH", "text": "x: Tensor",
         "user_line": {"file": "nn/modules/conv.py", "line": 560, "code": "return F.conv2d("}}]}]}
    reason = "tensor 'x' size mismatch at index 0. expected 16, actual 8"
    explanation = {
        "explanations": [{"cache_entries": [entry]}],
        "recompiles": [{"function": "forward", "file": FILE, "line": 29, "compile_id": "0/1", "reason": reason,
                        "failures": [{"compile_id": "0/0", "reason": reason, "subject": "x"}]}],
    }
    [row] = summary_of(tr.write(tmp_path), explanation=explanation).recompiles.to_dicts()
    assert (row["source"], row["library"]) == ("model.py:29", "torch/nn/modules/conv.py:560")
    asked = dynascope.summarize_files([tr.write(tmp_path)], explanation=explanation, library_frames=True).recompiles
    assert asked.to_dicts()[0]["source"] == "conv.py:560"


def test_recompiles_charged_to_one_line_are_one_row(tmp_path):
    """Torch before 2.9 names no guard's line: two causes then both fall on the function's line, one row."""
    tr = Trace()
    tr.compile(0, 4000, "0/0")
    tr.compile(10_000, 3000, "0/1")
    tr.compile(20_000, 1000, "0/2")
    size = "tensor 'x' size mismatch at index 0. expected 16, actual 8"
    explanation = {"explanations": [{"cache_entries": []}], "recompiles": [
        {"function": "forward", "file": FILE, "line": 29, "compile_id": "0/1", "reason": size,
         "failures": [{"compile_id": "0/0", "reason": size, "subject": "x"}]},
        {"function": "forward", "file": FILE, "line": 29, "compile_id": "0/2", "reason": "guard failed: n == 1",
         "failures": [{"compile_id": "0/0", "reason": "guard failed: n == 1", "subject": "n"}]},
    ]}  # fmt: skip
    [row] = summary_of(tr.write(tmp_path), explanation=explanation).recompiles.to_dicts()
    assert row["source"] == "model.py:29" and row["compile_ids"] == ["0/1", "0/2"] and row["total_us"] == 4000
    assert row["reason"].startswith(size) and "also: guard failed: n == 1" in row["reason"]


@pytest.mark.parametrize(("reason", "code", "detail", "says"), [
    ("Skip calling `torch.compiler.disable()`d function", "x = helper(x)", None, "helper is marked torch.compiler.disable"),
    ("call torch._dynamo.disable() wrapped function helper", "y = helper(y)", None, "helper is marked"),
    ("Failed to trace builtin operator", 'print("hi")', None, "reorderable_logging_functions"),
    ("Unsupported Tensor.item() call with capture_scalar_outputs=False", "n = x.item()", None, "capture_scalar_outputs"),
    ("Data-dependent branching", "if x.sum() > 0:", None, "torch.where"),
    ("Call to `torch._dynamo.graph_break()`", "torch._dynamo.graph_break()", None, "remove the torch._dynamo.graph_break"),
    ("Something new", "z = f(z)", "Hint: do the new thing\n  Hint: or another", "do the new thing"),
    ("Something new", "z = f(z)", None, "rewrite this line"),
])
def test_each_break_gets_a_fix_for_its_line(reason, code, detail, says):
    assert says in break_fix(reason, code, detail)


@pytest.mark.parametrize(("reason", "subject", "says"), [
    ("tensor 'x' size mismatch at index 0. expected 4, actual 5", "x", "mark_dynamic(x"),
    ("tensor 'x' dtype mismatch. expected Float, actual Double", "x", "cast it"),
    ("guard failed: n == 3", "n", "torch.tensor(n)"),
    ("___stack0 == 3", "___stack0", "keep it a tensor across the break"),
])
def test_each_recompile_gets_a_fix(reason, subject, says):
    assert says in recompile_fix(reason, subject)


def test_a_decorated_function_whose_own_frame_ran_beneath_the_wrapper_was_compiled(tmp_path):
    """transformers' forwards carry a decorator (functools.wraps): Dynamo compiles the wrapper first (0/0); it
    split at the call, so the function ran as a frame of its own (1/0) beneath it, with its graph. The call
    names the function, whose own frame is not the call's first: it was compiled all the same, not eager."""
    tr = Trace()
    for k in range(4):
        t = 10_000 * k
        tr.call("enter", t)
        tr.frame("enter", t + 10, "0/0", function="wrapper", line=5, breaks=1, break_at=6, reason="graph break",
                 code="out = func(self, *args)")
        tr.frame("enter", t + 20, "1/0")
        tr.graph(t + 30, 500, "1/0", 1)
        tr.frame("exit", t + 600, "1/0")
        tr.frame("exit", t + 620, "0/0", function="wrapper", line=5, breaks=1, break_at=6, reason="graph break",
                 code="out = func(self, *args)")
        tr.call("exit", t + 640)
    s = summary_of(tr.write(tmp_path), explanation={"explanations": []})
    assert s.graph_breaks.filter(pl.col("kind") == "eager function").height == 0
    [fn] = s.compiled_functions.to_dicts()
    assert fn["fallback_us"] == 0 and fn["graph_us"] == 500


def test_the_break_behind_an_eager_function_is_one_row_and_the_fix_gives_the_explanations_finding(tmp_path):
    """torch 2.8 logs the break that made Dynamo give up on a function, not that it fell back: the eager
    function's row is charged to that break, which the explanation lists under the compile that gave up
    (never seen running): one row for the site, with the compile ids of both."""
    tr = Trace()
    for k in range(3):
        t = 10_000 * k
        tr.call("enter", t)
        tr.frame("enter", t + 100, "5/0", function="block", line=40)
        tr.graph(t + 110, 50, "5/0", 9)
        tr.frame("exit", t + 200, "5/0", function="block", line=40)
        tr.call("exit", t + 1000)
    explanation = {
        "compile_times": [{"compile_id": "0/0", "function": "forward", "file": FILE, "line": 10, "status": "failed"}],
        "graph_breaks": [{"reason": "Data-dependent branching", "file": FILE, "line": 41, "function": "forward",
                          "compile_ids": ["0/0"], "count": 1}],
    }
    rows = summary_of(tr.write(tmp_path), explanation=explanation).graph_breaks.to_dicts()
    assert [r["source"] for r in rows] == ["model.py:41"]
    [row] = rows
    assert row["kind"] == "eager function" and row["calls"] == 2 and "0/0" in row["compile_ids"]
    # an explanation that knows nothing of it: its finding, not "run dynascope explain" (it has run)
    [known] = summary_of(tr.write(tmp_path), explanation={"explanations": []}).graph_breaks.to_dicts()
    assert "dynascope explain" not in known["fix"] and "no compile of it" in known["fix"]
    [bare] = summary_of(tr.write(tmp_path)).graph_breaks.to_dicts()  # no explanation at all: where to look
    assert "dynascope explain" in bare["fix"]


def test_a_break_in_ddps_own_code_is_told_by_its_file_where_the_reason_does_not_say_so():
    """torch 2.5.1 gives DDP's break an opaque reason; the library line torch names is DDP's file."""
    from dynascope.analyze.fixes import DDP_OWN_CODE, break_fix

    reason = "call_method UserDefinedObjectVariable(instancemethod) __call__ [] {}"
    assert break_fix(reason, "out = self.module(x)", None, where="train.py torch/nn/parallel/distributed.py:1511") \
        == DDP_OWN_CODE
    assert break_fix(reason, "out = self.module(x)", None, where="train.py") != DDP_OWN_CODE
