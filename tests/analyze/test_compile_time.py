"""One compile time per run: the wall-clock union of compiling on every thread, each instant charged to
exactly one compile id (analyze/partial.py `charge_compile_time`), on synthetic intervals checked against
a brute-force count of every microsecond, and on a trace shaped like a real inductor run (compile workers
logging their phases with the compile id "None", torch's str(None))."""

from __future__ import annotations

import random

import polars as pl
import pytest
import synth

from dynascope.analyze.partial_build import charge_compile_time
from dynascope.analyze.pipeline import summarize_files
from dynascope.artifacts.explanation import CompileTime, with_wall_times
from dynascope.explain.torch_records import apply_phases
from dynascope.render.explanation_text import compile_times_heading, observation_lines


def _brute(starts, ends, ids):
    """{id: µs} by looking at every microsecond: the covering interval with an id that started last (ties:
    the shorter, inner one) owns it; one covered only by id-less intervals goes to the id started last
    before it, else to the first id of all."""
    order = sorted(range(len(starts)), key=lambda i: (starts[i], -ends[i]))
    out: dict = {}
    first = next((ids[i] for i in order if ids[i] is not None), None)
    for t in range(min(starts), max(ends)):
        covering = [k for k, i in enumerate(order) if starts[i] <= t < ends[i]]
        if not covering:
            continue
        with_id = [k for k in covering if ids[order[k]] is not None]
        if with_id:
            who = ids[order[max(with_id)]]
        else:
            before = [k for k, i in enumerate(order) if ids[i] is not None and starts[i] <= t]
            who = ids[order[max(before)]] if before else first
        out[who] = out.get(who, 0) + 1
    return out


def _union(starts, ends):
    return len({t for s, e in zip(starts, ends, strict=True) for t in range(s, e)})


def test_overlapping_threads_and_ids_count_each_instant_once():
    # main thread: 0/0 [0,100) with a nested phase; a second thread compiles 1/0 [60,160) meanwhile;
    # workers (no id) [90,130) and [170,200) (after every compile: the one started last, 1/0)
    starts = [0, 10, 60, 90, 170]
    ends = [100, 50, 160, 130, 200]
    ids = ["0/0", "0/0", "1/0", None, None]
    got = charge_compile_time(starts, ends, ids)
    assert got == _brute(starts, ends, ids)
    assert got == {"0/0": 60, "1/0": 130}  # 0/0 until 1/0 starts; 1/0 from 60 to 160, and the worker's 170-200
    assert sum(got.values()) == _union(starts, ends) == 190


def test_worker_time_before_any_compile_goes_to_the_first_and_no_id_only_without_ids():
    assert charge_compile_time([0, 50], [40, 80], [None, "0/0"]) == {"0/0": 70}
    assert charge_compile_time([0, 10], [40, 20], [None, None]) == {None: 40}


@pytest.mark.parametrize("seed", range(40))
def test_random_intervals_agree_with_a_count_of_every_microsecond(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 12)
    starts = [rng.randint(0, 300) for _ in range(n)]
    ends = [s + rng.randint(1, 120) for s in starts]
    ids = [rng.choice([None, None, "0/0", "0/1", "1/0"]) for _ in range(n)]
    got = charge_compile_time(starts, ends, ids)
    assert got == _brute(starts, ends, ids)
    assert sum(got.values()) == _union(starts, ends)
    assert (None in got) == all(i is None for i in ids)


def _inductor_like_trace(tmp_path, none_as_string=True):
    """The shape of a real cold inductor run (dynascope demo, torch 2.13): the main thread compiles 0/0 and,
    later, the recompile 0/1, each waiting in async_compile.wait while two worker threads compile C++
    files whose events carry the compile id "None"; 0/0's backward is compiled lazily, after the frame."""
    pid, main, w1, w2 = 7, 7, 8, 9
    none = {"compile_id": "None"} if none_as_string else {}
    events = [
        synth.x(1, "entire_frame_compile", "dynamo.compile", pid, 1_000, 5_000, {"compile_id": "0/0"}, tid=main),
        synth.x(2, "async_compile.wait", "dynamo.compile", pid, 3_000, 2_500, {"compile_id": "0/0"}, tid=main),
        synth.x(3, "compile_file", "dynamo.compile", pid, 2_900, 2_000, none, tid=w1),
        synth.x(4, "compile_file", "dynamo.compile", pid, 3_100, 2_400, none, tid=w2),
        synth.x(5, "compile_file", "dynamo.compile", pid, 5_900, 400, none, tid=w1),  # ends after 0/0's frame
        synth.x(6, "entire_backward_compile", "dynamo.compile", pid, 7_000, 1_000, {"compile_id": "0/0"}, tid=main),
        synth.x(7, "entire_frame_compile", "dynamo.compile", pid, 9_000, 2_000, {"compile_id": "0/1"}, tid=main),
        synth.x(8, "compile_file", "dynamo.compile", pid, 9_500, 1_000, none, tid=w2),
        synth.x(9, "__compiled_fn_1.forward", "dynamo.graph", pid, 12_000, 100, {"compile_id": "0/0"}, tid=main),
    ]
    return synth.write_pfw(tmp_path / "t.pfw", events)


@pytest.mark.parametrize("none_as_string", [True, False])
def test_worker_threads_fold_into_the_compile_they_serve(tmp_path, none_as_string):
    s = summarize_files([_inductor_like_trace(tmp_path, none_as_string)])
    rows = dict(s.compile_vs_run.filter(pl.col("kind") == "compile").select("compile_id", "total_us").iter_rows())
    # 0/0: its frame [1000,6000) + the worker's 300 µs after it + its lazily compiled backward; 0/1: its frame
    assert rows == {"0/0": 5_000 + 300 + 1_000, "0/1": 2_000}
    union = 6_300 - 1_000 + 1_000 + 2_000
    assert s.meta["compile_us"] == sum(rows.values()) == union == s.by_process.get_column("compile_us").sum()
    assert s.meta["compile_us"] <= s.meta["span_us"]
    # the recompile table charges 0/1 the same per-id figure
    assert s.recompiles.get_column("total_us").to_list() == [rows["0/1"]]


def test_lazily_compiled_backward_is_part_of_the_compile_time():
    """torch's timers (seconds per event name, as the observer collects them): a backward compiled lazily
    counts in the compile id's total as backward_s; the phases inside it stay out of the frame's split."""
    ct = CompileTime(compile_id="0/0", function="forward", total_s=5.0)
    apply_phases(ct, {"entire_frame_compile": 5.0, "backend_compile": 4.0, "create_aot_dispatcher_function": 3.0,
                      "compile_fx.<locals>.fw_compiler_base": 2.0})  # fmt: skip
    assert (ct.total_s, ct.dynamo_s, ct.aot_s, ct.backend_s, ct.backward_s) == (5.0, 1.0, 1.0, 3.0, None)
    apply_phases(ct, {"entire_frame_compile": 5.0, "backend_compile": 4.0, "create_aot_dispatcher_function": 3.0,
                      "compile_fx.<locals>.fw_compiler_base": 2.0, "entire_backward_compile": 1.5,
                      "entire_backward_compile:compile_fx.<locals>.bw_compiler": 1.4})  # fmt: skip
    assert (ct.total_s, ct.dynamo_s, ct.aot_s, ct.backend_s, ct.backward_s) == (6.5, 1.0, 1.0, 3.0, 1.5)
    apply_phases(ct, {"entire_frame_compile": 5.0, "entire_backward_compile": 1.5})  # again: not added twice
    assert ct.total_s == 6.5
    # a backward compiled with the frame (not lazily) is AOT's compiler call, not AOT's own time
    eager_bw = CompileTime(compile_id="0/1", function="forward")
    apply_phases(eager_bw, {"entire_frame_compile": 5.0, "backend_compile": 4.0, "create_aot_dispatcher_function": 3.5,
                            "compile_fx.<locals>.fw_compiler_base": 1.5,
                            "compile_fx.<locals>.bw_compiler": 1.5})  # fmt: skip
    assert (eager_bw.aot_s, eager_bw.backward_s) == (0.5, None)
    text = "\n".join(r[0] if isinstance(r, tuple) else str(r) for r in _lines([ct, eager_bw]))
    assert "2 compiles, 11.500 s in all; backwards compiled lazily at their first backward() included (0/0)" in text


def _lines(times, wall=None):
    from dynascope.artifacts.explanation import Report

    return observation_lines(Report(compile_times=times), None, wall).rows


def test_explain_shows_the_traces_compile_times_when_it_has_one():
    times = [CompileTime(compile_id="0/0", function="forward", total_s=4.0, dynamo_s=1.0),
             CompileTime(compile_id="0/1", function="forward", total_s=1.0)]  # fmt: skip
    wall = {"0/0": 4_200_000, "0/1": 1_000_000, "1/0": 300_000}
    shown = with_wall_times(times, wall)
    assert [(c.compile_id, c.total_s, c.timers_s) for c in shown] == [
        ("0/0", 4.2, 4.0), ("0/1", 1.0, 1.0), ("1/0", 0.3, None)]  # fmt: skip
    assert shown[0].dynamo_s == 1.0 and times[0].total_s == 4.0  # the split kept, the explanation untouched
    heading = compile_times_heading(shown)
    assert heading.startswith(f"3 compiles, {sum(wall.values()) / 1e6:.3f} s in all; wall clock from the run's trace")
    text = "\n".join(r[0] if isinstance(r, tuple) else str(r) for r in _lines(times, wall))
    assert "5.500 s in all" in text and "1/0" in text


def test_the_steps_line_says_when_steps_hold_less_than_the_compile_time(tmp_path):
    """A compile after the last step (an evaluation compiled once training is done) is in the run's compile
    time but in no step: the steps line says how much of it the steps hold, on the same line."""
    from support import step_trace as st

    from dynascope.render._analysis import summarize_paths
    from dynascope.render._fmt import fmt_us
    from dynascope.render.terminal import short_step_lines

    tr = st.Trace(4242)
    loop = st.Loop(tr)
    for k in range(3):
        loop.iteration(lead=0 if k == 0 else 5, compile_us=900 if k == 0 else 0)
    tr.event("entire_frame_compile", "dynamo.compile", loop.t + 100, 5_000, {"compile_id": "1/0"})
    tr.end(loop.t + 6_000)
    s = summarize_paths([tr.write(tmp_path / "train-4242.pfw")])
    in_steps = int(s.by_step.get_column("compile_us").sum())
    total = s.meta["compile_us"]
    assert in_steps < total
    (line,) = [ln for ln in short_step_lines(s) if "time in steps" in ln]
    assert f"compile {fmt_share_of(in_steps, s)} ({fmt_us(in_steps)} in steps of {fmt_us(total)})" in line


def fmt_share_of(us: int, summary) -> str:
    from dynascope.render._fmt import fmt_share, step_part_totals

    return fmt_share(us / sum(v for _, _, v in step_part_totals(summary)))


def test_html_compile_times_are_the_traces(tmp_path):
    """The HTML's compile-time section and card show the trace's per-id figures (the report's), not torch's
    timers from the explanation, and say so; a compile id only the trace has gets its own row."""
    from dynascope.artifacts.explanation import Report
    from dynascope.render.html import render_html

    s = summarize_files([_inductor_like_trace(tmp_path)])
    report = Report(compile_times=[CompileTime(compile_id="0/0", function="forward", total_s=5.0)])
    html = render_html(s, report.to_dict())
    total = s.meta["compile_us"] / 1e6
    assert f"2 compiles, {total:.3f} s in all; wall clock from the run&#39;s trace" in html
    section = html.split('id="compile-times"', 1)[1].split("</section>", 1)[0]
    assert "in the trace only" in section  # 0/1: the explanation did not list it


def test_wall_times_applied_twice_keep_torchs_timers():
    """`dynascope run` writes explanation.json with the trace's figures (apply_wall_times); its readers apply
    the trace again: torch's own figure stays in timers_s, and each function's explanation agrees too."""
    from dynascope.artifacts.explanation import Explanation, FunctionRef, Report, apply_wall_times

    times = [CompileTime(compile_id="0/0", function="forward", total_s=4.0),
             CompileTime(compile_id="1/0", function="resume", total_s=0.5)]  # fmt: skip
    wall = {"0/0": 4_200_000, "1/0": 600_000}
    fn = Explanation(function=FunctionRef(name="forward"), compile_times=[times[0]])
    written = apply_wall_times(Report(compile_times=times, explanations=[fn]), wall)
    assert [(c.total_s, c.timers_s) for c in written.compile_times] == [(4.2, 4.0), (0.6, 0.5)]
    (own,) = written.explanations[0].compile_times  # the function's own: no row for another function's id
    assert (own.compile_id, own.total_s, own.timers_s) == ("0/0", 4.2, 4.0)
    again = with_wall_times(Report.from_json(written.to_json()).compile_times, wall)
    assert [(c.total_s, c.timers_s) for c in again] == [(4.2, 4.0), (0.6, 0.5)]
    assert times[0].total_s == 4.0 and times[0].timers_s is None  # the report given is not changed


def test_explain_without_a_trace_says_its_figures_are_torchs_timers():
    heading = compile_times_heading([CompileTime(compile_id="0/0", function="forward", total_s=1.0)])
    assert heading == "1 compile, 1.000 s in all; torch's own timers (a trace of the run measures the wall clock: dynascope run)"
