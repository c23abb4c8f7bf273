"""Summaries of the hand-written two-process trace (synth.py), checked against numbers worked out by hand.

Process A (pid 100, nodeA, rank 0): ops addmm 30, 40 (forward, fc1); relu 10, 10, 20 (forward, act);
mm 50, 60 (backward, fc1). Graph calls: forward 100, 80; backward 100, 90. Compile 0/0 = [1000,1500]
with a nested [1100,1300] phase, 1/0 = [1600,1700]. Epoch 0 region [2000,3000] holding step 0
[2000,2400] and step 1 [2500,2900]; the relu at 2450 lies between the steps.
Process B (pid 200, nodeB, rank 1): addmm 20, 20 inside one forward call of 70; compile 0/0 of 300.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import synth

from dynascope.analyze.pipeline import file_partial, finish, merge, summarize, summarize_files
from dynascope.analyze.read.reader import TraceWarning, read_trace, read_trace_with_info
from dynascope.analyze.summary_diff import diff_summaries

TABLES = ("by_op", "by_layer", "by_phase", "by_graph", "by_step", "by_process", "compile_vs_run", "top_ops")


@pytest.fixture
def files(tmp_path):
    return synth.write_two_process_trace(tmp_path / "t")


@pytest.fixture
def summary(files):
    return summarize(read_trace(files), top=2)


def test_by_op(summary):
    rows = summary.by_op.select("name", "count", "total_us", "mean_us", "p50_us", "p95_us", "min_us", "max_us").rows()
    # addmm and mm tie at 110 us: name order breaks the tie
    assert rows == [
        ("function.addmm.default", 4, 110, 27.5, 20, 40, 20, 40),  # 20 20 30 40: rank 2 -> 20, rank 4 -> 40
        ("function.mm.default", 2, 110, 55.0, 50, 60, 50, 60),  # rank 1 -> 50, rank 2 -> 60
        ("function.relu.default", 3, 40, 40 / 3, 10, 20, 10, 20),  # 10 10 20: rank 2 -> 10, rank 3 -> 20
    ]
    assert summary.by_op.get_column("share").to_list() == pytest.approx([110 / 260, 110 / 260, 40 / 260])
    assert set(summary.by_op.get_column("cat").to_list()) == {"dynamo"}
    assert summary.top == 2 and summary.top_ops.get_column("name").to_list() == ["function.addmm.default", "function.mm.default"]


def test_by_layer_and_phase(summary):
    assert summary.by_layer.select("layer", "module_type", "count", "total_us", "forward_us", "backward_us").rows() == [
        ("fc1", "Linear", 6, 220, 110, 110),
        ("act", "ReLU", 3, 40, 40, 0),
    ]
    assert summary.by_layer.get_column("share").to_list() == pytest.approx([220 / 260, 40 / 260])
    assert summary.by_phase.select("phase", "count", "total_us").rows() == [("forward", 7, 150), ("backward", 2, 110)]
    assert summary.by_phase.get_column("share").to_list() == pytest.approx([150 / 260, 110 / 260])


def test_by_graph(summary):
    rows = summary.by_graph.select("compile_id", "graph", "phase", "calls", "ops_per_call", "total_us", "mean_call_us").rows()
    assert rows == [
        ("0/0", "__compiled_fn_1", "forward", 3, pytest.approx(7 / 3), 250, pytest.approx(250 / 3)),
        ("0/0", "__compiled_fn_1", "backward", 2, 1.0, 190, 95.0),
    ]


def test_by_step_innermost_region(summary):
    assert summary.by_step.select("epoch", "step", "total_us", "op_us", "op_count").rows() == [
        (0, None, 1000, 20, 1),  # the epoch region keeps only the relu between the steps
        (0, 0, 400, 90, 3),  # 30 + 10 + 50
        (0, 1, 400, 110, 3),  # 40 + 10 + 60
    ]


def test_by_process_and_compile_vs_run(summary):
    assert summary.by_process.select("pid", "host", "rank", "events", "op_us", "compile_us", "run_us").rows() == [
        (100, "nodeA", 0, 19, 220, 600, 370),  # compile: union [1000,1500] = 500, plus 100; run: graph calls
        (200, "nodeB", 1, 6, 40, 300, 70),
    ]
    cvr = summary.compile_vs_run
    assert cvr.select("kind", "compile_id", "total_us").rows() == [("compile", "0/0", 800), ("compile", "1/0", 100), ("run", None, 440)]
    assert cvr.get_column("share").to_list() == pytest.approx([800 / 1340, 100 / 1340, 440 / 1340])


def test_meta(summary, files):
    m = summary.meta
    assert m["files"] == [str(f) for f in files]
    assert (m["events"], m["ops"], m["span_us"], m["compile_us"], m["run_us"]) == (25, 9, 5200 - 900, 900, 440)
    assert (m["dropped_lines"], m["dropped_events"], m["warnings"]) == (0, 2, [])


def test_meta_carries_read_warnings(tmp_path):
    p = synth.write_pfw(tmp_path / "torn.pfw", synth.process_b())
    with open(p, "a") as fh:
        fh.write('{"id":9,"name":"func')
    with pytest.warns(TraceWarning):
        frame, info = read_trace_with_info(p)
    s = summarize(frame, info=info)
    assert s.meta["dropped_lines"] == 1 and len(s.meta["warnings"]) == 1
    with pytest.warns(TraceWarning):
        s2 = summarize_files([p])
    assert s2.meta == s.meta


def assert_same(a, b):
    for t in TABLES:
        fa, fb = getattr(a, t), getattr(b, t)
        assert fa.equals(fb), (t, fa, fb)
        assert fa.schema == fb.schema, t
    assert a.meta == b.meta


def test_files_path_and_merge_equal_single_frame(files, summary):
    assert_same(summarize_files(files, top=2), summary)
    # any split by file merges to the same answer, in any order
    parts = [file_partial(f) for f in reversed(files)]
    assert_same(finish(merge(parts), top=2), summary)
    assert_same(finish(merge([merge(parts[:1]), merge(parts[1:])]), top=2), summary)


def test_percentiles_exact_on_many_values(tmp_path):
    # 1..100 us for one op: p50 = 50, p95 = 95 (nearest rank); split over 3 files
    paths = []
    for k in range(3):
        ev = [synth.x(1, "start", "dftracer", 10 + k, 0, 0, {"hhash": synth.HA, "rank": k, "world_size": 3})]
        ev += [synth.op(i + 2, "function.f", 10 + k, 10 * i, d, synth.OP_ADDMM, synth.HA) for i, d in enumerate(range(1 + k, 101, 3))]
        ev.append(synth.x(999, "end", "dftracer", 10 + k, 1000, 0, {"hhash": synth.HA}))  # a complete file
        paths.append(synth.write_pfw(tmp_path / f"p{k}.pfw", ev))
    s = summarize_files(paths)
    assert s.by_op.select("count", "total_us", "p50_us", "p95_us").row(0) == (100, 5050, 50, 95)
    assert_same(s, summarize(read_trace(paths)))


def test_empty_and_foreign_frames():
    s = summarize(pl.DataFrame({"name": ["x"], "cat": ["cpu_op"], "ts": [1], "dur": [2], "pid": [1], "tid": [1]}))
    assert s.by_op.height == 0 and s.by_step.height == 0
    assert s.compile_vs_run.rows() == [("run", None, 0, 0.0)]
    assert s.meta["events"] == 1 and s.meta["span_us"] == 2


def test_diff(files, tmp_path):
    a = summarize(read_trace(files))
    # B: process A only, with addmm twice as slow
    ev = synth.process_a()
    for e in ev:
        if e.get("name") == "function.addmm.default":
            e["dur"] *= 2
    b = summarize(read_trace(synth.write_pfw(tmp_path / "b.pfw", ev)))
    d = diff_summaries(a, b)
    ops = d["by_op"].select("name", "count_a", "count_b", "total_us_a", "total_us_b", "delta_us", "ratio").rows()
    # addmm: A 20+20+30+40 = 110 over 4 calls; B 60+80 = 140 over 2 calls
    assert ops == [
        ("function.addmm.default", 4, 2, 110, 140, 30, pytest.approx(140 / 110)),
        ("function.mm.default", 2, 2, 110, 110, 0, 1.0),
        ("function.relu.default", 3, 3, 40, 40, 0, 1.0),
    ]
    layers = d["by_layer"].select("layer", "total_us_a", "total_us_b", "delta_us").rows()
    assert layers == [("fc1", 220, 250, 30), ("act", 40, 40, 0)]
    totals = {r[0]: r[1:4] for r in d["totals"].rows()}
    assert totals["ops"] == (9, 7, -2) and totals["op_us"] == (260, 290, 30)


def test_diff_ops_only_on_one_side(tmp_path):
    a_ev = [synth.op(2, "function.only_a", 1, 0, 5, synth.OP_ADDMM, synth.HA)]
    b_ev = [synth.op(2, "function.only_b", 1, 0, 7, synth.OP_ADDMM, synth.HA)]
    a = summarize(read_trace(synth.write_pfw(tmp_path / "a.pfw", a_ev)))
    b = summarize(read_trace(synth.write_pfw(tmp_path / "b.pfw", b_ev)))
    rows = diff_summaries(a, b)["by_op"].select("name", "total_us_a", "total_us_b", "delta_us", "ratio").rows()
    assert rows == [("function.only_b", 0, 7, 7, None), ("function.only_a", 5, 0, -5, 0.0)]


def _refless_trace(path, calls: int, late_every: int = 7):
    """The writer's compact layout: op events carry no `op` (op k of a graph call has id = p_idx + 1 + k),
    graph events name their graph by a small integer, OH records carry graph_op/index; some graph lines
    come after their ops (every `late_every`-th call) to exercise late resolution."""
    pid, hh = 77, synth.HA

    def ev(name, cat, i, ts, dur, args):
        return {"name": name, "cat": cat, "pid": pid, "tid": pid, "ph": "X", "args": args, "id": i, "ts": ts, "dur": dur}

    lines = [
        synth.meta("HH", pid, {"hhash": hh, "name": "nodeZ", "value": hh}),
        {"id": 1, "name": "start", "cat": "dftracer", "pid": pid, "tid": pid, "ts": 0, "dur": 0, "ph": "X", "args": {"hhash": hh, "rank": 3, "world_size": 4}},
        synth.meta("OH", pid, {"hhash": hh, "value": 1, "hash": "00000000000000aa", "kind": "graph", "compile_id": "0/0", "graph": "__compiled_fn_1", "phase": "forward", "n_ops": 2}, cat="dynascope"),
        synth.meta("OH", pid, {"hhash": hh, "value": 2, "hash": "00000000000000bb", "graph_op": 1, "index": 0, "kind": "op", "compile_id": "0/0", "graph": "__compiled_fn_1", "phase": "forward", "layer": "fc1", "module_type": "Linear"}, cat="dynascope"),
        synth.meta("OH", pid, {"hhash": hh, "value": 3, "hash": "00000000000000cc", "graph_op": 1, "index": 1, "kind": "op", "compile_id": "0/0", "graph": "__compiled_fn_1", "phase": "forward", "layer": "act", "module_type": "ReLU"}, cat="dynascope"),
    ]  # fmt: skip
    i = 2
    for c in range(calls):
        t = 100 + 100 * c
        g = ev("__compiled_fn_1.forward", "dynamo.graph", i, t, 50, {"hhash": hh, "grad_enabled": 1, "op": 1, "level": 1, "p_idx": -1})
        o1 = ev("function.addmm.default", "dynamo", i + 1, t + 1, 10 + c % 5, {"grad_enabled": 1, "level": 2, "p_idx": i})
        o2 = ev("function.relu.default", "dynamo", i + 2, t + 20, 3, {"grad_enabled": 1, "level": 2, "p_idx": i})
        lines += [o1, o2, g] if c % late_every == 3 else [g, o1, o2]
        i += 3
    lines.append(ev("end", "dftracer", i, 100 + 100 * calls, 0, {"hhash": hh}))  # a complete file
    return synth.write_pfw(path, lines, bracket=False)


@pytest.mark.parametrize("calls", [5, 400])  # orjson only / the comma-split fast path
def test_refless_ops_resolve_through_their_graph_call(tmp_path, calls):
    p = _refless_trace(tmp_path / "z.pfw", calls)
    frame = read_trace(p)
    ops = frame.filter(pl.col("cat") == "dynamo")
    assert ops.height == 2 * calls and ops["layer"].null_count() == 0 and ops["host"].null_count() == 0
    assert ops.filter(pl.col("name") == "function.relu.default")["layer"].cast(pl.String).unique().to_list() == ["act"]
    s = summarize(frame)
    assert s.by_layer.select("layer", "count").rows() == [("fc1", calls), ("act", calls)]
    assert s.by_process.select("host", "rank").rows() == [("nodeZ", 3)]
    assert s.by_graph.select("calls", "ops").row(0) == (calls, 2 * calls)
    assert_same(summarize_files([p]), s)


def test_chrome_category_lists_count_by_their_first_category(files):
    frame = read_trace(files)
    converted = frame.with_columns(
        pl.when(pl.col("cat").cast(pl.String).is_in(["dynamo", "dynamo.graph"]))
        .then(pl.concat_str([pl.col("cat").cast(pl.String), pl.lit(","), pl.col("phase").cast(pl.String)]))
        .otherwise(pl.col("cat").cast(pl.String))
        .alias("cat")
    )
    assert "dynamo,forward" in converted["cat"].to_list()
    a, b = summarize(frame), summarize(converted)
    for t in ("by_op", "by_layer", "by_graph", "by_step", "by_process", "compile_vs_run"):
        assert getattr(a, t).equals(getattr(b, t)), t


def test_innermost_segments_disjoint_and_nested_agree_with_brute_force():
    import random

    from dynascope.analyze.steps import innermost_segments as _innermost_segments

    def brute(rids, starts, ends, t):
        best = None
        for r, s, e in zip(rids, starts, ends, strict=True):
            if s <= t <= e and (best is None or (s, -e, r) > best):
                best = (s, -e, r)
        return None if best is None else best[2]

    def lookup(segs, t):
        cur = None
        for b, r in zip(*segs, strict=True):
            if b <= t:
                cur = None if r < 0 else r
        return cur

    rnd = random.Random(5)
    for case in range(60):
        n = rnd.randint(1, 8)
        if case % 2:  # disjoint steps, some touching
            starts, ends, t = [], [], 0
            for _ in range(n):
                t += rnd.randint(0, 3)
                starts.append(t)
                t += rnd.randint(0, 5)
                ends.append(t)
                t += 1
        else:  # anything: nested, overlapping, equal, even a negative duration (covers nothing)
            starts = [rnd.randint(0, 20) for _ in range(n)]
            ends = [s + rnd.randint(-2 if case % 4 == 2 else 0, 10) for s in starts]
        rids = list(range(n))
        segs = _innermost_segments(*(np.array(v, dtype=np.int64) for v in (rids, starts, ends)))
        for t in range(-1, 35):
            assert lookup(segs, t) == brute(rids, starts, ends, t), (case, t, starts, ends, segs)


def test_count_in_segments_agrees_with_binary_search_in_any_op_order():
    import random

    from dynascope.analyze.read._scan import count_in_segments

    rnd = random.Random(7)
    bounds = np.array(sorted(rnd.sample(range(400), 40)), dtype=np.int64)
    owners = np.array([rnd.choice([-1, 0, 1, 2, 3]) for _ in bounds], dtype=np.int64)
    ts = np.array([rnd.randint(-20, 420) for _ in range(2000)], dtype=np.int64)
    ts[:1000].sort()  # in time order, then jumping back and forth
    dur = np.array([rnd.randint(0, 9) for _ in ts], dtype=np.int64)
    count, us = np.zeros(4, dtype=np.int64), np.zeros(4, dtype=np.int64)
    count_in_segments(bounds, owners, ts, dur, count, us)
    at = np.searchsorted(bounds, ts, side="right") - 1
    rid = np.where(at >= 0, owners[at], -1)
    inside = rid >= 0
    assert count.tolist() == np.bincount(rid[inside], minlength=4).tolist()
    assert us.tolist() == np.bincount(rid[inside], weights=dur[inside], minlength=4).astype(np.int64).tolist()


def test_compile_time_of_worker_threads_is_not_counted_twice(tmp_path):
    """Inductor compiles on worker threads while the main thread's compile waits for them; their compile
    events carry no compile id. Compile time is wall time: a worker's time inside an identified compile
    is already counted, and what lies outside every identified compile goes to the compile started last
    before it (the one the worker serves), never to a row without an id."""
    pid, tid, worker = 5, 5, 6

    def compile_event(i, name, ts, dur, cid, thread):
        args = {"compile_id": cid} if cid else {}
        return synth.x(i, name, "dynamo.compile", pid, ts, dur, args, tid=thread)

    events = [
        compile_event(1, "entire_frame_compile", 1000, 500, "0/0", tid),
        compile_event(2, "codegen_and_compile", 1100, 300, "0/0", tid),  # nested: no extra time
        compile_event(3, "async_compile.cpp", 1050, 400, None, worker),  # inside 0/0
        compile_event(4, "async_compile.cpp", 1450, 150, None, worker),  # 100 of it after 0/0 ends
        compile_event(5, "entire_frame_compile", 2000, 200, "1/0", tid),
    ]
    s = summarize_files([synth.write_pfw(tmp_path / "c.pfw", events)])
    rows = s.compile_vs_run.filter(pl.col("kind") == "compile").select("compile_id", "total_us").rows()
    assert rows == [("0/0", 600), ("1/0", 200)]
    assert s.meta["compile_us"] == 800 == s.by_process.get_column("compile_us").sum()  # the union: [1000,1600] + [2000,2200]
