"""Steps without user regions and the parts of each step (analyze/stepparts.py, stepstats.py), on synthetic
traces that follow the issue-15 event spec (tests/support/step_trace.py)."""

from __future__ import annotations

import warnings

import polars as pl
import pytest
import synth
from polars.testing import assert_frame_equal
from support import step_trace as st

import dynascope.analyze.partial as P
import dynascope.analyze.partial_build as PB
import dynascope.analyze.read.lines as _lines
from dynascope.analyze import fastpath
from dynascope.analyze.pipeline import finish, merge, summarize, summarize_files
from dynascope.analyze.read import _inflate
from dynascope.analyze.read.reader import read_trace
from dynascope.analyze.stepparts import PART_COLUMNS

TABLES = [
    "by_op", "by_layer", "by_phase", "by_graph", "by_step", "by_process", "compile_vs_run", "top_ops", "step_stats",
    "slow_steps", "by_file",
]  # fmt: skip


def _summary(paths):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return summarize_files(paths)


def _general(paths):
    return finish(merge([PB.general_file_partial(p) for p in paths]))


def _assert_same(a, b):
    for t in TABLES:
        assert_frame_equal(getattr(a, t), getattr(b, t), check_exact=True), t
    assert a.meta == b.meta


def _parts(summary) -> list[dict[str, int]]:
    return [st.parts_of(r) for r in summary.by_step.iter_rows(named=True)]


def _adds_up(summary) -> None:
    steps = summary.by_step
    total = steps.select(pl.sum_horizontal(PART_COLUMNS)).to_series()
    assert total.to_list() == steps.get_column("total_us").to_list()


@pytest.fixture
def training(tmp_path):
    tr, expected = st.training_trace()
    return tr.write(tmp_path / "train-4242.pfw.gz", gz=True), expected


def test_automatic_steps_and_their_parts(training):
    path, expected = training
    s = _summary([path])
    assert s.by_step.get_column("step").to_list() == list(range(8))
    assert s.by_step.get_column("epoch").null_count() == 8
    assert _parts(s) == expected
    _adds_up(s)
    assert s.by_step.get_column("regions").to_list() == [1] * 8
    # ops: two forward calls of 2 ops and one backward call of 3, every step
    assert s.by_step.get_column("op_count").to_list() == [7] * 8
    rows = {r["step"]: r for r in s.by_step.iter_rows(named=True)}
    assert (rows[0]["compiles"], rows[0]["compile_ids"]) == (1, ["0/0"])
    assert (rows[6]["compiles"], rows[6]["compile_ids"]) == (1, ["0/1"])
    assert rows[4]["saved"] == ["/tmp/run/ckpt-3.pt"]  # saved after step 3: in step 4
    assert sum(r["compiles"] for r in rows.values()) == 2


def test_compile_inside_a_forward_run_counts_as_compile(training):
    path, _ = training
    row = _summary([path]).by_step.filter(pl.col("step") == 6).row(0, named=True)
    # the two graph calls (20 + 10) and the eager code around the 700 µs compile between them (1 + 3)
    assert (row["forward_us"], row["compile_us"]) == (34, 700)


def test_overlaps_are_painted_by_priority(tmp_path):
    """compile > io > data > backward > optimizer > forward > eval; every instant counted once."""
    tr = st.Trace(9)
    tr.event("entire_frame_compile", "dynamo.compile", st.T0 + 0, 100, {"compile_id": "0/0"})
    tr.event("read", "POSIX", st.T0 + 5, 35, {"fhash": tr.fh("/d/x"), "fd": 3, "ret": 1})
    tr.event("write", "POSIX", st.T0 + 8, 2, {"fhash": tr.fh("/cache/kernel.cpp"), "fd": 4, "ret": 9})  # compiling
    tr.graph_call("forward", st.T0 + 10, 20)
    tr.event("dataloader.next", "dataloader", st.T0 + 50, 100, {"loader": 1, "batch": 0, "workers": 0})
    tr.event("backward", "autograd", st.T0 + 120, 80)
    tr.event("optimizer.step", "optimizer", st.T0 + 180, 120, {"optimizer": "SGD", "opt": 1})
    tr.event("torch.save", "torch.io", st.T0 + 250, 30, {"fhash": tr.fh("/d/ckpt.pt"), "bytes": 10})  # I/O
    tr.graph_call("forward", st.T0 + 400, 20)  # after the last step: in no step
    tr.end(st.T0 + 500)
    s = _summary([tr.write(tmp_path / "t-9.pfw")])
    (row,) = s.by_step.iter_rows(named=True)
    assert row["total_us"] == 300
    assert st.parts_of(row) == {
        "data": 50, "forward": 0, "backward": 50, "optimizer": 70, "io": 30, "compile": 100, "other": 0,
    }  # fmt: skip
    assert row["saved"] == ["/d/ckpt.pt"] and row["compile_ids"] == ["0/0"]  # not what compiling wrote


def test_forward_runs_stop_at_data_backward_optimizer_io(tmp_path):
    """Eager time between forward graph calls is forward only when nothing of data, backward, optimizer
    or I/O lies between them."""
    tr = st.Trace(11)
    t = st.T0
    tr.graph_call("forward", t, 10)  # run 1: [0, 40)
    tr.graph_call("forward", t + 30, 10)
    tr.event("optimizer.zero_grad", "optimizer", t + 50, 5, {"optimizer": "SGD", "opt": 1})
    tr.graph_call("forward", t + 70, 10)  # run 2: [70, 80), the gap [40, 70) holds the zero_grad
    tr.event("read", "POSIX", t + 85, 10, {"fhash": tr.fh("/d/a"), "fd": 3, "ret": 1})
    tr.graph_call("forward", t + 100, 10)  # the read breaks the run: [100, 110) is run 3
    tr.event("optimizer.step", "optimizer", t + 120, 10, {"optimizer": "SGD", "opt": 1})
    tr.end(t + 200)
    (row,) = _summary([tr.write(tmp_path / "t-11.pfw")]).by_step.iter_rows(named=True)
    assert row["total_us"] == 130
    assert st.parts_of(row) == {
        "data": 0, "forward": 40 + 10 + 10, "backward": 0, "optimizer": 15, "io": 10, "compile": 0,
        "other": 10 + 15 + 5 + 5 + 10,
    }  # fmt: skip


def _loop_with(steps_of_opt, iterations: int, tmp_path, name: str = "t-21.pfw"):
    """A loop of `iterations` iterations; after iteration i, each optimizer in steps_of_opt(i) steps
    (in that order)."""
    tr = st.Trace(21)
    loop = st.Loop(tr)
    ends = []
    for i in range(iterations):
        parts = loop._new()
        loop.gap(0 if i == 0 else 5, parts)
        loop.data(50, parts)
        loop.forward(parts)
        loop.backward(parts)
        for opt in steps_of_opt(i):
            loop.step(parts, opt=opt, name=f"Opt{opt}")
            ends.append((opt, loop.t))
    tr.end(loop.t + 100)
    return tr.write(tmp_path / name), ends


def test_pacing_optimizer_has_the_most_steps(tmp_path):
    """Optimizer 2 steps every iteration, optimizer 1 every other: optimizer 2 paces the steps."""
    path, ends = _loop_with(lambda i: [1, 2] if i % 2 else [2], 6, tmp_path)
    s = _summary([path])
    assert s.by_step.height == 6
    _adds_up(s)
    assert s.by_step.get_column("total_us").sum() == max(t for opt, t in ends if opt == 2) - st.T0


def test_two_optimizers_tied_the_later_one_closes_the_step(tmp_path):
    """Two optimizers stepping once per iteration (a GAN): the one whose first step comes last closes it."""
    path, ends = _loop_with(lambda i: [1, 2], 4, tmp_path)
    s = _summary([path])
    assert s.by_step.height == 4
    closing = [t for opt, t in ends if opt == 2]
    starts = [st.T0, *closing[:-1]]
    assert s.by_step.get_column("total_us").to_list() == [b - a for a, b in zip(starts, closing, strict=True)]
    _adds_up(s)
    # both optimizers' steps are optimizer time of the step they fall in
    assert s.by_step.get_column("optimizer_us").to_list() == [30] * 4


def test_gradient_accumulation(tmp_path):
    """optimizer.step every fourth micro-batch: one step holds four forwards and backwards."""
    path, _ = _loop_with(lambda i: [1] if i % 4 == 3 else [], 12, tmp_path)
    s = _summary([path])
    assert s.by_step.height == 3
    _adds_up(s)
    assert s.by_step.get_column("data_us").to_list() == [200] * 3
    assert s.by_step.get_column("backward_us").to_list() == [160] * 3
    assert s.by_step.get_column("op_count").to_list() == [28] * 3


def test_user_regions_win(tmp_path):
    """A thread with user step regions keeps them as its steps, even with optimizer steps; its parts
    are painted inside each region."""
    tr = st.Trace(31)
    loop = st.Loop(tr)
    for k in range(3):
        start = loop.t
        loop.iteration(lead=0, compile_us=500 if k == 0 else 0)
        tr.event("step", "train", start, loop.t - start, {"epoch": 0, "step": k})
        loop.t += 20
    tr.end(loop.t)
    s = _summary([tr.write(tmp_path / "t-31.pfw")])
    assert s.by_step.get_column("epoch").to_list() == [0, 0, 0]
    assert _parts(s) == loop.iterations
    _adds_up(s)


def test_other_threads_get_their_own_steps(tmp_path):
    """Regions on one thread do not stop automatic steps on another."""
    tr = st.Trace(41)
    tr.event("step", "train", st.T0, 100, {"step": 0}, tid=7)
    loop = st.Loop(tr)
    for _ in range(2):
        loop.iteration(lead=0)
    tr.end(loop.t)
    s = _summary([tr.write(tmp_path / "t-41.pfw")])
    assert s.by_step.select("epoch", "step", "regions").rows() == [(None, 0, 2), (None, 1, 1)]
    row0 = s.by_step.row(0, named=True)
    assert row0["other_us"] >= 100  # the region's 100 µs has no events of its thread: other
    _adds_up(s)


def test_fast_path_equals_general_reader(tmp_path, monkeypatch):
    """Training process and two workers, cut into tiny chunks: the same Partial both ways."""
    monkeypatch.setattr(_lines, "CHUNK_BYTES", 3000)
    monkeypatch.setattr(_inflate, "_MAX_OUT", 2500)
    monkeypatch.setattr(fastpath, "_REST_BATCH", 1500)
    monkeypatch.setattr(fastpath, "_GRAPH_BATCH", 7)
    tr, _ = st.training_trace(steps=40, slow_data=7, recompile=30, save_after=12)
    paths = [tr.write(tmp_path / "train-4242.pfw.gz", gz=True, per_member=33)]
    for w in range(2):
        worker = st.worker_trace(5000 + w, 4242, w, list(range(w, 40, 2)), st.T0)
        paths.append(worker.write(tmp_path / f"train-{5000 + w}.pfw"))
    fast = _summary(paths)
    _assert_same(fast, _general(paths))
    assert fast.by_step.height == 40
    _adds_up(fast)
    # the whole frame at once (read_trace + summarize) agrees too
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _assert_same(fast, summarize(read_trace(paths, columns=P.SUMMARY_COLUMNS)))


def test_merge_in_any_split_is_the_same(tmp_path):
    a, _ = st.training_trace(pid=100, steps=5)
    b, _ = st.training_trace(pid=200, steps=7, slow_data=2, recompile=None, save_after=None)
    paths = [a.write(tmp_path / "t-100.pfw"), b.write(tmp_path / "t-200.pfw")]
    parts = [fastpath.file_partial(p) for p in paths]
    one = finish(merge(parts))
    other = finish(merge([merge([parts[1]]), merge([parts[0]])]))
    _assert_same(one, other)
    # steps of two processes with the same number add up, names are joined
    assert one.by_step.height == 7
    assert one.by_step.get_column("regions").to_list() == [2] * 5 + [1] * 2
    assert one.by_step.filter(pl.col("step") == 0).get_column("compile_ids").to_list() == [["0/0"]]
    assert one.by_step.filter(pl.col("step") == 0).get_column("compiles").item() == 2
    _adds_up(one)


def test_old_traces_read_as_before(tmp_path):
    """The hand-written two-process trace: by_step's columns as before (test_summarize has the numbers),
    and its regions painted: compile, forward and backward graph calls, the rest other."""
    s = _summary(synth.write_two_process_trace(tmp_path / "t"))
    assert s.by_step.select("epoch", "step", "total_us", "op_us", "op_count", "regions").rows() == [
        (0, None, 1000, 20, 1, 1),  # the epoch region keeps only the relu between the steps
        (0, 0, 400, 90, 3, 1),
        (0, 1, 400, 110, 3, 1),
    ]
    _adds_up(s)
    step0 = s.by_step.row(1, named=True)
    assert (step0["forward_us"], step0["backward_us"], step0["other_us"]) == (100, 100, 200)
    assert step0["data_us"] == step0["optimizer_us"] == step0["io_us"] == step0["compile_us"] == 0
    assert s.step_stats.get_column("part").to_list()[0] == "total"


def test_no_steps_no_step_tables(tmp_path):
    """No regions and no optimizer steps (process B of the two-process trace): nothing."""
    path = synth.write_pfw(tmp_path / "t-200.pfw", synth.process_b())
    s = _summary([path])
    assert s.by_step.height == 0 and s.step_stats.height == 0 and s.slow_steps.height == 0
    assert set(PART_COLUMNS) <= set(s.by_step.columns)


def test_step_statistics_and_slow_steps(training):
    path, expected = training
    s = _summary([path])
    stats = {r["part"]: r for r in s.step_stats.iter_rows(named=True)}
    walls = sorted(sum(e.values()) for e in expected)
    assert stats["total"]["median_us"] == walls[3]  # nearest rank: the 4th of 8
    assert stats["total"]["p95_us"] == walls[7]
    assert stats["data"]["median_us"] == 50 and stats["data"]["max_us"] == 2000
    assert stats["compile"]["total_us"] == 1600
    assert abs(sum(stats[p]["share"] for p in st.PARTS) - 1.0) < 1e-9
    slow = s.slow_steps.to_dicts()
    assert [r["step"] for r in slow] == [5, 0, 6]
    assert [r["part"] for r in slow] == ["data", "compile", "compile"]
    assert slow[0]["why"] == "data wait +1.95 ms (data stall)"
    assert slow[1]["why"] == "compile +900 µs (1 compile started: 0/0)"
    assert slow[2]["why"] == "compile +700 µs (recompile: 1 compile started: 0/1)"


def test_checkpoint_and_no_reason(tmp_path):
    """A slow step whose I/O stands out names the file; one slower everywhere a little names no part."""
    tr = st.Trace(51)
    loop = st.Loop(tr)
    for k in range(6):
        loop.iteration(lead=0 if k == 0 else 5, data=60 if k == 4 else 50, backward=50 if k == 4 else 40)
        if k == 1:
            loop.save(loop.carry, "/ckpt/epoch-1.pt", us=3000)
    tr.end(loop.t)
    s = _summary([tr.write(tmp_path / "t-51.pfw")])
    slow = {r["step"]: r for r in s.slow_steps.iter_rows(named=True)}
    assert slow[2]["why"] == "I/O +3 ms (saved epoch-1.pt)"
    assert slow[4]["part"] is None
    assert slow[4]["why"] == "no part stands out (+20 µs over the median step, spread over the parts)"


def _training_step(tr, t: int, *, eval_calls: int = 0, save: int = 0) -> int:
    """One training iteration from t, 10 µs between its pieces: a batch (50), `eval_calls` compiled calls
    run with grad disabled (20 each, 10 apart), a torch.save of `save` µs (a write inside it), the training
    forward (30), backward (50), optimizer.step (40), which ends the step. Returns that end."""
    tr.event("dataloader.next", "dataloader", t, 50, {"loader": 1, "batch": 0, "workers": 0})
    t += 60
    for _ in range(eval_calls):
        tr.graph_call("inference", t, 20, compile_id="0/1")  # grad_enabled 0 (step_trace)
        t += 30
    if save:
        tr.event("torch.save", "torch.io", t, save, {"fhash": tr.fh("/run/ckpt.pt"), "bytes": 10})
        tr.event("write", "POSIX", t + 1, save - 2, {"fhash": tr.fh("/run/ckpt.pt"), "fd": 5, "ret": 10})
        t += save + 10
    tr.graph_call("forward", t, 30)
    tr.event("backward", "autograd", t + 40, 50)
    tr.event("optimizer.step", "optimizer", t + 100, 40, {"optimizer": "SGD", "opt": 1})
    return t + 140


def test_eval_and_a_checkpoint_inside_a_step(tmp_path):
    """Calls with grad disabled in a training loop are eval, not forward; a torch.save between them and the
    training forward is I/O, not forward (issue 25, defect 4); the parts still add up to the step."""
    tr = st.Trace(12)
    t = _training_step(tr, st.T0, eval_calls=2, save=40)
    # a read while compiling between two forward calls is compile's: it does not end the forward run
    tr.graph_call("forward", t, 10)
    tr.event("entire_frame_compile", "dynamo.compile", t + 20, 40, {"compile_id": "1/0"})
    tr.event("read", "POSIX", t + 30, 10, {"fhash": tr.fh("/cache/k.py"), "fd": 3, "ret": 1})
    tr.graph_call("forward", t + 70, 10)
    tr.event("backward", "autograd", t + 90, 10)
    tr.event("optimizer.step", "optimizer", t + 100, 10, {"optimizer": "SGD", "opt": 1})
    tr.end(t + 200)
    s = _summary([tr.write(tmp_path / "t-12.pfw")])
    _adds_up(s)
    first, second = s.by_step.iter_rows(named=True)
    # eval: the run [60, 110) of the two calls; I/O: the save [120, 160); forward: its one call
    assert {p: first[f"{p}_us"] for p in ("data", "eval", "io", "forward", "backward", "optimizer")} == {
        "data": 50, "eval": 50, "io": 40, "forward": 30, "backward": 50, "optimizer": 40,
    }  # fmt: skip
    assert first["other_us"] == first["total_us"] - 260 == 50
    assert first["saved"] == ["/run/ckpt.pt"]
    assert (second["forward_us"], second["compile_us"], second["io_us"], second["eval_us"]) == (40, 40, 0, 0)


def test_calls_without_grad_are_the_forward_of_a_thread_that_never_trains(tmp_path):
    """An inference loop (step regions, no backward, no optimizer): its no-grad calls are its forward."""
    tr = st.Trace(13)
    for i in range(3):
        t = st.T0 + 100 * i
        tr.event("step", "user", t, 90, {"step": i})
        tr.event("dataloader.next", "dataloader", t, 20, {"loader": 1, "batch": i, "workers": 0})
        tr.graph_call("inference", t + 30, 20)
        tr.graph_call("inference", t + 60, 20)
    tr.end(st.T0 + 400)
    s = _summary([tr.write(tmp_path / "t-13.pfw")])
    _adds_up(s)
    assert s.by_step.get_column("forward_us").to_list() == [50, 50, 50]
    assert s.by_step.get_column("eval_us").to_list() == [0, 0, 0]


def test_slowest_steps_name_the_checkpoint_and_the_evaluation(tmp_path):
    """A step that evaluates and saves a checkpoint is slow because of its I/O and its eval, not its forward."""
    tr = st.Trace(14)
    t = st.T0
    for i in range(6):
        t = _training_step(tr, t, eval_calls=8 if i == 3 else 0, save=400 if i == 3 else 0)
    tr.end(t + 100)
    s = _summary([tr.write(tmp_path / "t-14.pfw")])
    _adds_up(s)
    (slow,) = s.slow_steps.iter_rows(named=True)
    assert slow["step"] == 3 and slow["part"] == "io"
    assert slow["why"].startswith("I/O +400 µs (saved ckpt.pt); also eval +")
    assert "forward" not in slow["why"]
    stats = {r["part"]: r for r in s.step_stats.iter_rows(named=True)}
    assert stats["eval"]["max_us"] == 8 * 30 - 10 and stats["forward"]["max_us"] == 30
