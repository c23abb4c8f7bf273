"""The invariant checker itself: each invariant catches the defect it is for (the figures quoted in
issue 25) and passes output that holds it. No torch, no run: text and tables as dynascope prints them."""

from __future__ import annotations

import gzip
import json

import pytest
from support.invariants import (
    Outputs,
    check,
    check_json_like,
    check_no_explain_advice,
    check_saves_are_io,
    check_terminal,
    check_trace,
    durations,
    parse_duration,
)

GOOD_RUN = """\
epoch 0: loss 2.361
files 1  ·  events 7,951  ·  op events 162  ·  span 21.7 s  ·  processes 1
compile 20 s (99.5%), run 105 ms  |  forward 59.2 ms (56.2%), backward 46.1 ms (43.8%)
Steps: 3 · median 3.08 ms, p95 16.7 s per step
  time in steps: compile 99.3%, forward 0.3%, backward 0.3%, other <0.1%, optimizer <0.1%,
data <0.1%, I/O <0.1%

Top 2 inductor kernels by total time

 kernel                       compile   phase      calls     total      mean   share
 ──────────────────────────────────────────────────────────────────────────────────
 extern_kernels.convolution   0/0       forward        6   37.5 ms   6.26 ms   35.6%
 extern_kernels.addmm         0/0       forward        6   7.12 ms   1.19 ms    6.8%

trace        out/train-2098.pfw.gz
"""


def test_durations_read_every_form_dynascope_prints():
    assert [d.seconds for d in durations("840 µs, 12.3 ms, 4.56 s, 2 min 5 s")] == pytest.approx([840e-6, 12.3e-3, 4.56, 125])
    assert parse_duration("1 min 4 s").tolerance == 0.5
    assert parse_duration("13.8 s").tolerance == pytest.approx(0.05)
    assert parse_duration("18.5 m") is None and parse_duration("597") is None and parse_duration("0/0") is None


def test_a_run_that_holds_the_invariants_passes():
    assert check_terminal(GOOD_RUN, "run stdout", run_output=True) == []


def test_compile_longer_than_the_span_is_caught():
    text = GOOD_RUN.replace("compile 20 s (99.5%)", "compile 25.4 s (99.6%)")  # the demo in issue 25
    assert any(f.startswith("[compile<=span]") and "25.4 s > span 21.7 s" in f for f in check_terminal(text, "run stdout", run_output=True))


def test_cut_and_missing_units_in_a_table_are_caught():
    cut = GOOD_RUN.replace("37.5 ms   6.26 ms", "37.5 m    6.26 m ")  # issue 25: "18.5 m   597 µ"
    failures = check_terminal(cut, "run stdout", run_output=True)
    assert sum(f.startswith("[units]") and "cut unit" in f for f in failures) == 2, failures
    bare = GOOD_RUN.replace("37.5 ms   6.26 ms", "37.5      6.26   ")  # at 100 columns: "18.5    597"
    failures = check_terminal(bare, "run stdout", run_output=True)
    assert sum(f.startswith("[units]") and "no unit" in f for f in failures) == 2, failures


def test_a_figure_wrapped_away_from_its_unit_is_caught():
    text = GOOD_RUN.replace("backward 46.1 ms (43.8%)", "backward 46.1\nms (43.8%)")
    assert any("cuts a figure from its unit" in f for f in check_terminal(text, "run stdout", run_output=True))


def test_shares_that_do_not_add_to_100_are_caught_even_when_wrapped():
    text = GOOD_RUN.replace("backward 0.3%, other", "backward 5.3%, other")
    assert any(f.startswith("[shares]") and "'time in steps'" in f for f in check_terminal(text, "run stdout", run_output=True))
    text = GOOD_RUN.replace("(43.8%)", "(33.8%)")
    assert any(f.startswith("[shares]") and "headline" in f for f in check_terminal(text, "run stdout", run_output=True))


def test_a_row_listed_twice_is_caught():
    row = " extern_kernels.addmm         0/0       forward        6   7.12 ms   1.19 ms    6.8%\n"
    text = GOOD_RUN.replace(row, row + row.replace("7.12 ms", "5.01 ms"))
    assert any(f.startswith("[duplicate]") and "extern_kernels.addmm | 0/0 | forward" in f for f in check_terminal(text, "run stdout", run_output=True))


def test_a_break_listed_twice_in_a_numbered_list_is_caught():
    text = """Graph breaks by cost (steady state, warm-up calls left out)
  1. modeling_gpt2.py:812
     hits 6, per call 2.89 ms
  2. modeling_gpt2.py:812
     not seen running in the trace
"""
    failures = check_terminal(text, "run stdout", piped_width=None)
    assert failures == ["[duplicate] run stdout, list 'Graph breaks by cost (steady state, warm-up calls left out)': modeling_gpt2.py:812 is listed 2 times"]


def test_a_table_the_checker_cannot_read_is_a_failure_not_a_pass():
    unreadable = GOOD_RUN.replace(" ──────────────────────────────────────────────────────────────────────────────────\n", "")
    assert any(f.startswith("[tables]") for f in check_terminal(unreadable, "run stdout", run_output=True))


def test_step_table_parts_must_add_to_the_wall_time():
    table = """\
Steps: where each step's time goes (not shown at this width: I/O)

   step      wall   forward   backward     other
 ──────────────────────────────────────────────
      0    27.2 ms   20.1 ms     6.9 ms    200 µs
      1    34.1 ms   20.1 ms     6.9 ms    200 µs
"""
    failures = check_terminal(table, "report (terminal)", piped_width=None)
    assert len(failures) == 1 and failures[0].startswith("[step parts]") and "step 1" in failures[0], failures


def test_advice_to_run_explain_is_caught():
    line = "  fix: run dynascope explain to see why"
    assert check_no_explain_advice(GOOD_RUN, "run stdout") == []
    assert len(check_no_explain_advice(GOOD_RUN + line, "run stdout")) == 1


def summary(**changes) -> dict:
    base = {
        "top": 20,
        "meta": {"span_us": 21_703_247, "compile_us": 20_012_552, "run_us": 105_344},
        "by_step": [
            {"step": 0, "total_us": 16_694_502, "data_us": 4692, "forward_us": 50742, "eval_us": 0, "backward_us": 39085,
             "optimizer_us": 6970, "io_us": 0, "compile_us": 16_587_491, "other_us": 5522, "compile_ids": ["0/0"]},
            {"step": 3, "total_us": 3_431_075, "data_us": 95, "forward_us": 1906, "eval_us": 0, "backward_us": 2398,
             "optimizer_us": 213, "io_us": 0, "compile_us": 3_425_061, "other_us": 1402, "compile_ids": ["0/1"]},
        ],
        "compile_vs_run": [
            {"kind": "compile", "compile_id": "0/0", "total_us": 16_587_491, "share": 0.8245},
            {"kind": "compile", "compile_id": "0/1", "total_us": 3_425_061, "share": 0.1703},
            {"kind": "run", "compile_id": None, "total_us": 105_344, "share": 0.0052},
        ],
        "cache_entries": [{"compile_id": "0/0", "compile_us": 16_587_491}, {"compile_id": "0/1", "compile_us": 3_425_061}],
        "by_phase": [{"phase": "forward", "share": 0.562}, {"phase": "backward", "share": 0.438}],
        "recompiles": [{"source": "train.py:29", "file": "/home/u/train.py", "line": 29, "reason": "size", "total_us": 3_425_061, "compile_ids": ["0/1"]}],
        "graph_breaks": [],
    }
    base.update(changes)
    return base


def test_a_consistent_summary_passes():
    assert check_json_like(summary(), "report --json", 20) == []


def test_a_compile_row_with_no_id_and_rows_that_exceed_the_total_are_caught():
    rows = [*summary()["compile_vs_run"], {"kind": "compile", "compile_id": None, "total_us": 17_600_000, "share": 0.4}]
    failures = check_json_like(summary(compile_vs_run=rows), "report --json", 20)
    assert any(f.startswith("[compile ids]") and "17.600 s" in f for f in failures)
    assert any(f.startswith("[compile rows]") and "compile_vs_run" in f for f in failures)


def test_compile_over_span_and_step_parts_are_caught_in_json():
    failures = check_json_like(summary(meta={"span_us": 50_600_000, "compile_us": 59_200_000}), "report --json", 20)
    assert any(f.startswith("[compile<=span]") for f in failures)
    steps = summary()["by_step"]
    steps[0] = {**steps[0], "forward_us": steps[0]["forward_us"] + 6900}  # a checkpoint counted as forward and I/O
    assert any(f.startswith("[step parts]") and "step 0" in f for f in check_json_like(summary(by_step=steps), "report --json", 20))


def test_a_recompile_charged_more_than_its_compiles_and_to_a_library_line_is_caught():
    recompile = {**summary()["recompiles"][0], "total_us": 18_500_000, "file": "nn/modules/linear.py", "line": 134}
    failures = check_json_like(summary(recompiles=[recompile]), "report --json", 20)
    assert any(f.startswith("[compile rows]") and "18.500 s" in f for f in failures)
    assert any(f.startswith("[user frame]") and "linear.py" in f for f in failures)


def test_a_break_listed_twice_and_shares_over_100_are_caught():
    brk = {"source": "modeling.py:10", "file": "/x/modeling.py", "line": 10, "function": "forward", "reason": "r"}
    failures = check_json_like(summary(graph_breaks=[brk, {**brk, "note": "not seen running"}]), "report --json", 20)
    assert any(f.startswith("[duplicate]") and "graph_breaks" in f for f in failures)
    failures = check_json_like(summary(by_phase=[{"phase": "forward", "share": 0.7}, {"phase": "backward", "share": 0.438}]), "x", 20)
    assert any(f.startswith("[shares]") and "by_phase" in f for f in failures)


def test_explain_and_headline_totals_must_agree_or_state_the_difference(tmp_path):
    outputs = Outputs(out_dir=tmp_path, report_json=summary())
    outputs.explanation = {"compile_times": [{"compile_id": "0/0", "total_s": 9.84}, {"compile_id": "0/1", "total_s": 3.425061}]}
    outputs.explain_text = "Compile times (2 compiles, 13.265 s in all):\n  id  total s\n  0/0  9.840  x\n  0/1  3.425  x\n"
    failures = check(outputs)
    assert any(f.startswith("[compile total]") and "explain DIR says 13.265 s" in f for f in failures)
    assert any(f.startswith("[compile rows]") and "compile 0/0" in f for f in failures)
    stated = "Compile times (2 compiles, 13.265 s in all; plus 6.748 s compiling backward lazily, not in the rows):\n"
    outputs.explain_text = stated + "  id  total s\n  0/0  9.840  x\n  0/1  3.425  x\n"
    assert not any("explain DIR says" in f for f in check(outputs))


def write_trace(path, events):
    lines = ["["] + [json.dumps({"ph": "X", "pid": 1, "tid": 1, "args": {}, **e}) for e in events]
    with gzip.open(path, "wt") as handle:
        handle.write("\n".join(lines) + "\n")


def test_an_op_outside_its_graph_call_is_caught(tmp_path):
    path = tmp_path / "t-1.pfw.gz"
    graph = {"id": 2, "name": "__compiled_fn_1.forward", "cat": "dynamo.graph", "ts": 1000, "dur": 100}
    inside = {"id": 3, "name": "extern_kernels.mm", "cat": "dynamo", "ts": 1010, "dur": 50, "args": {"p_idx": 2}}
    write_trace(path, [{"id": 1, "name": "start", "cat": "dftracer", "ts": 0, "dur": 0}, graph, inside])
    assert check_trace(str(path)) == []
    outside = {**inside, "id": 4, "ts": 1080, "dur": 50}
    write_trace(path, [{"id": 1, "name": "start", "cat": "dftracer", "ts": 0, "dur": 0}, graph, inside, outside])
    failures = check_trace(str(path))
    assert any(f.startswith("[inside graph call]") and "1 op/kernel events" in f for f in failures), failures


def test_dynascope_lines_wider_than_a_log_file_are_caught_when_piped():
    wide = GOOD_RUN.replace("   share\n", "   share   fused ops                      layers\n")
    assert any(f.startswith("[width]") for f in check_terminal(wide, "run stdout", run_output=True))
    assert check_terminal(wide, "explain DIR", piped_width=None) == []


def test_a_checkpoint_saved_in_a_step_must_be_that_steps_io(tmp_path):
    """Issue 25: a 6.9 ms torch.save inside a step with evaluation was reported as forward (I/O 67 µs)."""
    path = tmp_path / "t-1.pfw.gz"
    fh = {"ph": "M", "name": "FH", "cat": "dftracer", "pid": 1, "tid": 1, "args": {"name": "/run/out/ckpt.pt", "value": "ab"}}
    save = {"id": 2, "name": "torch.save", "cat": "torch.io", "ts": 5000, "dur": 6900, "args": {"fhash": "ab", "p_idx": -1}}
    write_trace(path, [fh, {"id": 1, "name": "start", "cat": "dftracer", "ts": 0, "dur": 0}, save])
    step = {"step": 4, "total_us": 40_000, "data_us": 100, "forward_us": 27_200, "eval_us": 0, "backward_us": 5000,
            "optimizer_us": 3000, "io_us": 67, "compile_us": 0, "other_us": 4633, "saved": ["/run/out/ckpt.pt"]}
    failures = check_saves_are_io({"by_step": [step]}, [str(path)])
    assert len(failures) == 1 and failures[0].startswith("[I/O part]") and "6900 µs" in failures[0], failures
    fixed = {**step, "forward_us": 20_367, "io_us": 6900}
    assert check_saves_are_io({"by_step": [fixed]}, [str(path)]) == []


def test_installed_packages_above_the_programs_data_are_caught():
    """Issue 25: the file table was led by every package's dist-info/entry_points.txt, above val.bin."""
    rows = [{"fname": "(Python imports and metadata: 2,359 files)", "group": "imports", "share": 0.6},
            {"fname": "/run/data/val.bin", "group": "program", "share": 0.4}]
    assert any(f.startswith("[file order]") for f in check_json_like(summary(by_file=rows), "report --json", 20))
    assert check_json_like(summary(by_file=rows[::-1]), "report --json", 20) == []
