"""GPU time on CPU machines: the device-activity path (capture/device.py -> the writer's join ->
"gpu" events -> summaries and the Chrome export) driven by sources that need no GPU.

- `CpuOpsSource` (device.CpuStandInSource) reads torch's profiler exactly as the CUDA source does, but
  with CPU activity: each outermost aten op stands for a kernel that its own thread launched when it began. Real profiler
  times, the real clock alignment, the real join to dynascope's op events.
- `PlannedSource` hands back device intervals planned by the test (a known busy time in each step).
The CUDA source itself is exercised by the `gpu` tests at the end, which skip without a GPU.
"""

from __future__ import annotations

import io
import json
import os
import re
import threading
import types

import polars as pl
import pytest
import torch

import dynascope
from dynascope import _torch
from dynascope.capture import device
from dynascope.console import make_console
from dynascope.render.chrome import convert
from dynascope.render.terminal import render_summary
from dynascope.trace.buffers import now_ns
from dynascope.trace.launches import DeviceRecord

STANDS_IN = {"aten::addmm": "function.addmm.default", "aten::mm": "function.mm.default",
             "aten::relu": "function.relu.default", "aten::threshold_backward": "function.threshold_backward.default"}  # fmt: skip


def CpuOpsSource():
    return device.CpuStandInSource(set(STANDS_IN))


class PlannedSource:
    """Device intervals planned by the test: `plan` is called at stop and returns the records."""

    def __init__(self, plan):
        self.plan = plan
        self.stops = []  # (pid, thread) of each stop

    def start(self):
        pass

    def stop(self):
        self.stops.append((os.getpid(), threading.get_ident()))
        records = self.plan()
        return lambda: records


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def run_with(tmp_path, source, steps=4, regions=True):
    model = torch.compile(mlp(), backend=dynascope.backend(name="aot_eager"))
    with dynascope.session(str(tmp_path / "run.pfw.gz")):
        device.install(source=source)
        for i in range(steps):
            if regions:
                with dynascope.region("step", step=i):
                    model(torch.randn(8, 16)).sum().backward()
            else:
                model(torch.randn(8, 16)).sum().backward()
    assert not device.installed()  # the session's end stopped it
    return dynascope.read_trace(str(tmp_path))


def test_each_kernel_is_joined_to_the_op_that_launched_it(tmp_path):
    source = CpuOpsSource()
    frame = run_with(tmp_path, source)
    gpu = frame.filter(pl.col("cat") == "gpu")
    ops = frame.filter(pl.col("cat") == "dynamo")
    assert gpu.height == len(source.records) > 0
    attributed = gpu.filter(pl.col("launcher").is_not_null())
    # every op of the graphs launched its kernel: the ones left are the user's eager .sum() and compile's own
    assert attributed.height >= 4 * 3 * 2
    for row in attributed.iter_rows(named=True):
        assert row["launcher"] == STANDS_IN[row["name"]]  # aten::addmm came from function.addmm.default
        holder = ops.filter((pl.col("tid") == row["ltid"]) & (pl.col("ts") <= row["launch"])
                            & (pl.col("ts") + pl.col("dur") >= row["launch"]))  # fmt: skip
        assert row["launcher"] in holder.get_column("name").cast(pl.String).to_list()
        assert row["phase"] in ("forward", "backward") and row["layer"] in ("0", "1", "2")
    # its own track, named for the device and stream
    assert gpu.get_column("tid").n_unique() == 1 and gpu.get_column("tid")[0] not in ops.get_column("tid").to_list()
    assert set(attributed.get_column("device").to_list()) == {0} and set(attributed.get_column("stream").to_list()) == {7}


def test_summaries_put_gpu_time_beside_cpu_time(tmp_path):
    source = CpuOpsSource()
    frame = run_with(tmp_path, source)
    attributed = frame.filter((pl.col("cat") == "gpu") & pl.col("launcher").is_not_null())
    want = dict(attributed.group_by(pl.col("launcher").cast(pl.String)).agg(pl.col("dur").sum()).iter_rows())
    from_files = dynascope.summarize_files(str(tmp_path))
    from_rows = dynascope.summarize(frame)
    for summary in (from_files, from_rows):
        got = {r["name"]: r["gpu_us"] for r in summary.by_op.iter_rows(named=True) if r["gpu_us"]}
        assert got == want
        layers = {r["layer"]: r["gpu_us"] for r in summary.by_layer.iter_rows(named=True)}
        assert sum(layers.values()) == sum(want.values()) and layers["1"] > 0  # ReLU's kernels
        [row] = summary.by_device.to_dicts()
        assert (row["device"], row["stream"], row["activity"]) == (0, 7, "kernel")
        assert row["count"] == len(source.records) and 0 < row["launched"] <= 1
        assert {"gpu_us", "gpu_idle_us"} <= set(summary.by_step.columns)
    assert from_files.by_step.equals(from_rows.by_step)


def test_work_no_op_launched_is_put_down_to_the_step_event_it_was_launched_in(tmp_path):
    """The optimizer runs eagerly here: its kernels have no launching op, but they were launched inside
    optimizer.step, and the report says so."""
    source = device.CpuStandInSource()  # every outermost aten op, the optimizer's too
    model = torch.compile(mlp(), backend=dynascope.backend(name="aot_eager"))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    with dynascope.session(str(tmp_path / "run.pfw.gz")):
        device.install(source=source)
        for i in range(3):
            with dynascope.region("step", step=i):
                opt.zero_grad()
                model(torch.randn(8, 16)).sum().backward()
                opt.step()
    frame = dynascope.read_trace(str(tmp_path))
    steps = frame.filter(pl.col("name") == "optimizer.step")
    want = sum(
        r["dur"] for r in frame.filter((pl.col("cat") == "gpu") & pl.col("launcher").is_null()).iter_rows(named=True)
        if any(a <= r["launch"] <= a + d for a, d in steps.select("ts", "dur").iter_rows())
    )  # fmt: skip
    for summary in (dynascope.summarize_files(str(tmp_path)), dynascope.summarize(frame)):
        rows = {r["launched_from"]: r for r in summary.gpu_launchers.to_dicts()}
        assert next(iter(rows)) == "traced ops and kernels" and rows["traced ops and kernels"]["total_us"] > 0
        assert rows["optimizer.step"]["total_us"] == want > 0
        assert rows["optimizer.step"]["count"] >= 3 * 4  # an add_ per parameter per step
        assert sum(r["share"] for r in rows.values()) == pytest.approx(1.0)
    out = io.StringIO()
    render_summary(dynascope.summarize_files(str(tmp_path)), make_console(out, width=200))
    assert "Who launched the GPU's work" in out.getvalue()


def test_gpu_idle_in_each_step_is_what_the_device_did_not_cover(tmp_path):
    marks = []

    def plan():  # busy for the first half of each step, in two overlapping kernels on two streams
        out = []
        for a, b in marks:
            half = a + (b - a) // 2
            out.append(DeviceRecord("k1", "kernel", 0, 7, a, a + (b - a) // 3, 0, 0))
            out.append(DeviceRecord("k2", "kernel", 0, 9, a + (b - a) // 4, half, 0, 0))
        return out

    model = torch.compile(mlp(), backend=dynascope.backend(name="aot_eager"))
    with dynascope.session(str(tmp_path / "run.pfw.gz")):
        device.install(source=PlannedSource(plan))
        for i in range(3):
            with dynascope.region("step", step=i):
                a = now_ns()
                model(torch.randn(8, 16)).sum().backward()
                marks.append((a, now_ns()))
    summary = dynascope.summarize_files(str(tmp_path))
    for row in summary.by_step.iter_rows(named=True):
        assert row["gpu_us"] + row["gpu_idle_us"] == row["total_us"]
        assert row["gpu_us"] == pytest.approx(row["total_us"] / 2, abs=max(3, 0.05 * row["total_us"]))
    unlaunched = summary.by_device.filter(pl.col("activity") == "kernel")
    assert unlaunched.get_column("launched").to_list() == [0.0, 0.0]  # no launch recorded: no op to charge


def test_the_chrome_export_draws_an_arrow_from_each_launch_to_its_kernel(tmp_path):
    run_with(tmp_path, CpuOpsSource(), steps=2)
    out = tmp_path / "out.json"
    convert([str(tmp_path / f) for f in _traces(tmp_path)], out)
    events = json.loads(out.read_text())["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    kernels = [e for e in events if e.get("cat") == "gpu" and e.get("ph") == "X"]
    starts = {e["id"]: e for e in events if e.get("cat") == "gpu" and e.get("ph") == "s"}
    ends = {e["id"]: e for e in events if e.get("cat") == "gpu" and e.get("ph") == "f"}
    assert kernels and set(starts) == set(ends) and len(starts) == len(kernels)
    # numbers: Perfetto reads a string id as hex and drops the flow when it is not ("gpu1" was)
    assert all(isinstance(i, int) for i in starts)
    ops = [e for e in events if (e.get("cat") or "").startswith("dynamo,") and e.get("ph") == "X"]
    launched = {(e["tid"], e["ts"]): e["args"].get("launcher") for e in kernels}
    for flow, s in starts.items():
        f = ends[flow]
        assert names[(f["pid"], f["tid"])] == "GPU 0 stream 7"
        assert (s["pid"], s["tid"]) != (f["pid"], f["tid"]) and s["ts"] <= f["ts"]
        launcher = launched[(f["tid"], f["ts"])]
        if launcher:  # the arrow starts inside the slice of the op that launched it, on its thread
            holders = [o["name"] for o in ops if o["tid"] == s["tid"] and o["ts"] <= s["ts"] <= o["ts"] + o["dur"]]
            assert launcher in holders, (s, holders)
    assert sum(1 for v in launched.values() if v) >= 2 * 3


def test_the_terminal_report_shows_gpu_beside_cpu_and_the_gpu_idle_time(tmp_path):
    run_with(tmp_path, CpuOpsSource(), steps=3)
    out = io.StringIO()
    render_summary(dynascope.summarize_files(str(tmp_path)), make_console(out, width=200))
    text = out.getvalue()
    assert "What ran on the GPU" in text and "launched by an op" in text
    ops_header = next(line for line in text.splitlines() if line.split()[:2] == ["op", "cat"])
    assert ops_header.split()[3:5] == ["total", "GPU"]  # CPU launch time, then device time
    assert "GPU busy" in text and "GPU idle" in text
    assert re.search(r"GPU: busy \S+ \S+ of the steps' \S+ \S+; idle \S+ \S+ \(\d+%\)", text)


def test_a_cuda_graph_replay_is_one_event_that_launches_its_kernels(tmp_path, monkeypatch):
    """mode="reduce-overhead" on CUDA: inductor replays each graph's kernels with no Python between them.
    CPU graphs are never captured, so the test says they were; extern_kernels.addmm/mm then run as aten
    ops inside the replay and stand in for the replayed kernels."""
    monkeypatch.setattr(_torch, "inductor_cudagraphs", lambda kwargs: True)
    source = CpuOpsSource()
    model = torch.compile(mlp(), backend=dynascope.backend(inner="inductor"))
    with dynascope.session(str(tmp_path / "run.pfw.gz")):
        device.install(source=source)
        for i in range(3):
            with dynascope.region("step", step=i):
                model(torch.randn(8, 16)).sum().backward()
    frame = dynascope.read_trace(str(tmp_path))
    ops = frame.filter(pl.col("cat") == "dynamo")
    assert set(ops.get_column("name").cast(pl.String).to_list()) == {"cudagraph_replay"}
    assert sorted(ops.get_column("phase").to_list()) == ["backward"] * 3 + ["forward"] * 3
    assert set(ops.get_column("kernel_kind").to_list()) == {"cudagraph"}
    for row in ops.iter_rows(named=True):  # every layer of the graph (in its order), none singled out
        assert sorted(row["layers"].split(",")) == ["0", "1", "2"] and row["layer"] == ""
    gpu = frame.filter((pl.col("cat") == "gpu") & pl.col("launcher").is_not_null())
    assert gpu.height >= 3 * 3  # two addmm forward, mm's backward
    assert set(gpu.get_column("launcher").to_list()) == {"cudagraph_replay"}
    for row in gpu.iter_rows(named=True):  # each inside the replay that launched it
        holder = ops.filter((pl.col("tid") == row["ltid"]) & (pl.col("ts") <= row["launch"])
                            & (pl.col("ts") + pl.col("dur") >= row["launch"]))  # fmt: skip
        assert holder.height == 1 and holder.get_column("phase")[0] == row["phase"]
    [replay] = dynascope.summarize_files(str(tmp_path)).by_kernel.filter(pl.col("phase") == "forward").to_dicts()
    assert (replay["name"], replay["kernel_kind"], replay["count"]) == ("cudagraph_replay", "cudagraph", 3)
    forward = gpu.filter(pl.col("phase") == "forward").get_column("dur").sum()
    assert replay["gpu_us"] == pytest.approx(forward, abs=1)


def test_reduce_overhead_on_cpu_traces_each_kernel(tmp_path):
    """Inductor captures no CPU graph, so mode="reduce-overhead" traces a CPU model kernel by kernel."""
    model = torch.compile(mlp(), backend=dynascope.backend(inner="inductor"), mode="reduce-overhead")
    with dynascope.session(str(tmp_path / "run.pfw.gz")):
        model(torch.randn(8, 16)).sum().backward()
    names = set(dynascope.read_trace(str(tmp_path)).filter(pl.col("cat") == "dynamo").get_column("name").to_list())
    assert "extern_kernels.addmm" in names and "cudagraph_replay" not in names


def test_collected_activity_is_handed_over_while_the_program_runs(tmp_path, monkeypatch):
    batch = iter(range(1, 100))
    source = PlannedSource(lambda: [DeviceRecord(f"k{next(batch)}", "kernel", 0, 7, now_ns() - 1000, now_ns(), 0, 0)])
    monkeypatch.setattr(device, "CYCLE_S", 0.0)
    with dynascope.session(str(tmp_path / "run.pfw.gz")) as session:
        device.install(source=source)
        elsewhere = threading.Thread(target=device.sink)
        elsewhere.start()
        elsewhere.join()
        assert source.stops == []  # only the thread that started the profiler stops it
        device.sink()
        device.sink()
        assert len(source.stops) == 2
        session.flush()
        assert dynascope.read_trace(str(tmp_path)).filter(pl.col("cat") == "gpu").height == 2  # written already
    names = dynascope.read_trace(str(tmp_path)).filter(pl.col("cat") == "gpu").get_column("name").cast(pl.String)
    assert sorted(names.to_list()) == ["k1", "k2", "k3"]  # the third batch at the session's end


def test_a_batch_handed_over_during_a_flush_waits_for_the_readings_that_launched_it(tmp_path, monkeypatch):
    """The flush thread drains a program thread's readings, the program runs on and hands a batch over,
    and the same flush then joins the batch: its launches after the drain found no op and were lost."""
    from dynascope.trace.writer import TraceWriter

    source = CpuOpsSource()
    model = torch.compile(mlp(), backend=dynascope.backend(name="aot_eager"))
    drain = TraceWriter._drain
    raced = []

    def drain_then_run_on(self, buffer, final, emit):
        drain(self, buffer, final, emit)
        if not raced and not final and buffer.tid == threading.get_native_id():
            raced.append((now_ns() + device.epoch_offset()) // 1000)  # the trace's µs
            model(torch.randn(8, 16)).sum().backward()  # readings after the drain, launches in the batch
            device._collector.take(restart=True)

    with dynascope.session(str(tmp_path / "run.pfw.gz")) as session:
        device.install(source=source)
        model(torch.randn(8, 16)).sum().backward()  # compiles
        monkeypatch.setattr(TraceWriter, "_drain", drain_then_run_on)
        session._writer.flush()
        monkeypatch.setattr(TraceWriter, "_drain", drain)
    assert raced
    gpu = dynascope.read_trace(str(tmp_path)).filter((pl.col("cat") == "gpu") & (pl.col("launch") >= raced[0]))
    assert gpu.height >= 3 and gpu.get_column("launcher").null_count() == 0  # addmm, addmm, mm's: all joined


def test_graphs_on_cuda_get_the_sink_that_hands_activity_over(tmp_path):
    def graph_on(device_type):
        g = torch.fx.Graph()
        x = g.placeholder("x")
        x.meta["val"] = types.SimpleNamespace(device=types.SimpleNamespace(type=device_type))
        g.output(x)
        return torch.fx.GraphModule(torch.nn.Module(), g)

    from dynascope.capture.backend import _sink
    from dynascope.trace import buffers

    assert _sink(graph_on("cuda")) is buffers.sink  # nothing collected
    with dynascope.session(str(tmp_path / "run.pfw.gz")):
        device.install(source=PlannedSource(list))
        assert _sink(graph_on("cuda")) is device.sink
        assert _sink(graph_on("cpu")) is buffers.sink


def test_a_forked_child_leaves_the_parents_profiler_alone(tmp_path):
    if not hasattr(os, "fork"):
        pytest.skip("no fork")
    source = PlannedSource(list)
    with dynascope.session(str(tmp_path / "run.pfw.gz")):
        device.install(source=source)
        pid = os.fork()
        if pid == 0:  # the child: its own session, closed on the way out; it must not stop the source
            code = 1
            try:
                from dynascope.trace import session as session_module

                session_module.current_session().finalize()
                code = 0 if not device.installed() and source.stops == [] else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert device.installed()
    assert source.stops == [(os.getpid(), threading.get_ident())]


def test_a_profiler_of_the_programs_own_runs_and_device_time_steps_aside_meanwhile(tmp_path, capsys, monkeypatch):
    """torch runs one profiler at a time, and a second one silently takes over the first. dynascope hands
    its activity over when the program's own profiler starts, and collects again once it stops: both
    see what ran while each was on, and the steps in between get no GPU figures (not a false idle)."""
    monkeypatch.setattr(device, "_noted", set())  # said once a process: as if this were the first time
    original = torch.autograd.profiler.profile._prepare_trace
    source = CpuOpsSource()
    model = torch.compile(mlp(), backend=dynascope.backend(name="aot_eager"))
    with dynascope.session(str(tmp_path / "run.pfw.gz")):
        device.install(source=source)
        for i in range(4):
            with dynascope.region("step", step=i):
                if i == 2:
                    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                        model(torch.randn(8, 16)).sum().backward()
                else:
                    model(torch.randn(8, 16)).sum().backward()
    assert torch.autograd.profiler.profile._prepare_trace is original  # put back with the session's end
    assert {"aten::addmm", "aten::mm"} <= {e.name for e in prof.events()}  # the program's profiler saw step 2
    frame = dynascope.read_trace(str(tmp_path))
    [paused] = frame.filter(pl.col("name") == "device time paused").to_dicts()
    steps = frame.filter(pl.col("cat") == "region").sort("step")
    windows = [(r["ts"], r["ts"] + r["dur"]) for r in steps.iter_rows(named=True)]
    assert windows[1][1] <= paused["ts"] and paused["ts"] + paused["dur"] <= windows[3][0]  # within step 2
    launched = frame.filter((pl.col("cat") == "gpu") & pl.col("launcher").is_not_null())
    seen = {step for step, (a, b) in enumerate(windows) for t in launched.get_column("ts").to_list() if a <= t <= b}
    assert seen == {0, 1, 3}  # before and after the program's profiler; nothing of its stretch
    summary = dynascope.summarize_files(str(tmp_path))
    gpu = dict(summary.by_step.select("step", "gpu_us").iter_rows())
    assert gpu[2] is None and all(gpu[k] > 0 for k in (0, 1, 3))
    out = io.StringIO()
    render_summary(summary, make_console(out, width=200))
    assert "(1 step without: the program's own profiler ran)" in out.getvalue()
    err = capsys.readouterr().err
    assert err.count("GPU times pause while the program's own profiler runs") == 1


def test_a_session_that_ends_inside_the_programs_profiler_marks_the_stretch(tmp_path):
    model = torch.compile(mlp(), backend=dynascope.backend(name="aot_eager"))
    profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    session = dynascope.session(str(tmp_path / "run.pfw.gz"))
    device.install(source=CpuOpsSource())
    with dynascope.region("step", step=0):
        model(torch.randn(8, 16)).sum().backward()
    profiler.start()
    with dynascope.region("step", step=1):
        model(torch.randn(8, 16)).sum().backward()
    session.finalize()
    profiler.stop()  # after the session: nothing of dynascope's is left to resume
    assert not device.installed()
    gpu = dict(dynascope.summarize_files(str(tmp_path)).by_step.select("step", "gpu_us").iter_rows())
    assert gpu[0] > 0 and gpu[1] is None


def _traces(tmp_path):
    return sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".pfw.gz"))


def test_profiler_events_become_device_records_on_the_traces_clock():
    cpu = -1
    runtime = _torch.Activity("cudaLaunchKernel", False, cpu, 4242, 1_000_000, 1_004_000, 17)
    kernel = _torch.Activity("sgemm_128x64", True, 1, 7, 1_010_000, 1_050_000, 17)
    orphan = _torch.Activity("Memcpy HtoD (Pageable -> Device)", True, 1, 13, 1_060_000, 1_061_000, 99)
    records = device.device_records([runtime, kernel, orphan], offset_ns=1_000_000)
    assert records == [
        DeviceRecord("sgemm_128x64", "kernel", 1, 7, 10_000, 50_000, 4242, 0),
        DeviceRecord("Memcpy HtoD (Pageable -> Device)", "memcpy", 1, 13, 60_000, 61_000, 0, 0),
    ]


def cupti_thread_id(ident: int) -> int:
    """How CUPTI names a thread: the low 32 bits of its pthread id (Python's thread ident), signed."""
    low = ident & 0xFFFFFFFF
    return low - (1 << 32) if low >= 1 << 31 else low


class CuptiStyleSource(device.CpuStandInSource):
    """The CPU stand-in's kernels handed back as CUPTI hands kernels over on a GPU (seen on an H100 with
    torch 2.11): a device activity, and a runtime call with the same correlation id on a thread named by
    cupti_thread_id, not by its native id, with a "Lazy Function Loading" event inside the first call
    (same correlation id, no thread). They go through device_records as the CUDA source's do."""

    def stop(self):
        records = super().stop()()
        cupti = {threading.get_native_id(): cupti_thread_id(threading.get_ident())}
        off = self.offset_ns
        activities = []
        for i, r in enumerate(records, start=1):
            launch = r.launch_ns + off
            activities += [_torch.Activity("cudaLaunchKernel", False, -1, cupti.get(r.launch_tid, r.launch_tid), launch, launch + 2_000, i),
                           _torch.Activity(r.name, True, 0, 7, r.start_ns + off, r.end_ns + off, i)]  # fmt: skip
            if i == 1:
                activities.append(_torch.Activity("Lazy Function Loading", False, -1, 0, launch + 500, launch + 1_500, i))
        self.records = device.device_records(activities, off)
        records = self.records
        return lambda: records


def test_kernels_are_joined_to_their_ops_when_the_profiler_names_the_thread_as_cupti_does(tmp_path):
    """On a GPU, torch's profiler names the launching thread of a CUDA call by CUPTI's id, the low 32 bits
    of the pthread id, unless it recorded CPU events on that thread itself: the join maps it back to the
    native id that dynascope's op readings carry (before, no kernel of a CUDA-only run was joined)."""
    source = CuptiStyleSource(set(STANDS_IN))
    frame = run_with(tmp_path, source)
    attributed = frame.filter((pl.col("cat") == "gpu") & pl.col("launcher").is_not_null())
    assert attributed.height >= 4 * 3 * 2  # every op of the graphs launched its kernel (compile and .sum() too)
    for row in attributed.iter_rows(named=True):
        assert row["launcher"] == STANDS_IN[row["name"]] and row["ltid"] == threading.get_native_id()
    assert cupti_thread_id(threading.get_ident()) != threading.get_native_id()  # the case is the real one


def test_the_launching_call_is_the_earliest_event_with_the_kernels_correlation_id():
    lazy = _torch.Activity("Lazy Function Loading", False, -1, 0, 1_001_000, 1_002_000, 5)
    call = _torch.Activity("cuLaunchKernel", False, -1, 4242, 1_000_000, 1_003_000, 5)
    kernel = _torch.Activity("triton_poi_fused_add_0", True, 0, 7, 1_010_000, 1_020_000, 5)
    (record,) = device.device_records([lazy, call, kernel], offset_ns=1_000_000)
    assert (record.launch_ns, record.launch_tid) == (0, 4242)  # no thread that recorded here: left as it is


def test_a_profiler_that_cannot_start_leaves_tracing_as_it_was(tmp_path):
    class Busy(PlannedSource):
        def start(self):
            raise RuntimeError("Can't enable Kineto profiler when it's already running")

    with dynascope.session(str(tmp_path / "run.pfw.gz")) as session:
        with pytest.raises(RuntimeError):
            device.install(source=Busy(list))
        assert not device.installed() and session._writer.decoder.launches is None  # nothing kept for it
    assert dynascope.read_trace(str(tmp_path)).filter(pl.col("cat") == "gpu").height == 0


def test_a_busy_profiler_is_one_line_that_says_what_to_do(monkeypatch):
    def busy(cuda):
        raise RuntimeError("Can't enable Kineto profiler when it's already running\n(C++ frames...)")

    monkeypatch.setattr(_torch, "start_activity", busy)
    with pytest.raises(dynascope.DynascopeError) as caught:
        device.CuptiSource().start()
    message = str(caught.value)
    assert "\n" not in message and "already running" in message and "DYNASCOPE_DEVICE_TIME=0" in message


def test_without_cuda_nothing_is_collected_and_tracing_goes_on(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    frame = run_with(tmp_path, source=None, steps=1)  # install(source=None): CUDA's source, or none
    assert frame.filter(pl.col("cat") == "gpu").height == 0 and frame.filter(pl.col("cat") == "dynamo").height > 0


# ------------------------------------------------------------------------------- on a GPU


@pytest.mark.gpu
def test_cuda_kernels_are_timed_and_joined_to_their_ops(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    model = torch.compile(mlp().cuda(), backend=dynascope.backend(name="aot_eager"))
    with dynascope.session(str(tmp_path / "run.pfw.gz")):
        assert device.installed()
        for i in range(5):
            with dynascope.region("step", step=i):
                model(torch.randn(64, 16, device="cuda")).sum().backward()
        torch.cuda.synchronize()
    frame = dynascope.read_trace(str(tmp_path))
    kernels = frame.filter((pl.col("cat") == "gpu") & (pl.col("activity") == "kernel"))
    assert kernels.height >= 5 * 3
    attributed = kernels.filter(pl.col("launcher").is_not_null())
    assert attributed.height / kernels.height > 0.5
    summary = dynascope.summarize_files(str(tmp_path))
    assert summary.by_op.get_column("gpu_us").sum() > 0 and summary.by_device.height >= 1


@pytest.mark.gpu
def test_cuda_inductor_kernels_and_cuda_graph_replays_are_joined_to_their_launchers(tmp_path):
    """On CUDA, inductor's Triton and library kernels get the kernel event that launched them, and with
    mode="reduce-overhead" each graph replay's kernels get that replay's event (CUPTI gives a replayed
    kernel the correlation id of its cudaGraphLaunch)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    for mode, launchers in ((None, None), ("reduce-overhead", {"cudagraph_replay"})):
        torch._dynamo.reset()
        out = tmp_path / (mode or "default")
        model = torch.compile(mlp().cuda(), backend=dynascope.backend(inner="inductor"), mode=mode)
        with dynascope.session(str(out / "run.pfw.gz")):
            for i in range(6):
                # CUDA graph trees overwrite the last step's gradients, and adding to them is refused (seen on
                # an H100 with torch 2.11, without dynascope too): each step starts from no gradients
                model.zero_grad(set_to_none=True)
                with dynascope.region("step", step=i):
                    model(torch.randn(64, 16, device="cuda")).sum().backward()
            torch.cuda.synchronize()
        frame = dynascope.read_trace(str(out))
        ops = frame.filter(pl.col("cat") == "dynamo")
        attributed = frame.filter((pl.col("cat") == "gpu") & pl.col("launcher").is_not_null())
        assert attributed.height >= 6  # at least a kernel a step, forward and backward
        if launchers:
            assert set(ops.get_column("name").cast(pl.String).to_list()) == launchers
            assert set(attributed.get_column("launcher").to_list()) == launchers
        else:
            assert set(attributed.get_column("launcher").to_list()) <= set(ops.get_column("name").to_list())


@pytest.mark.gpu
def test_cuda_a_profiler_of_the_programs_own_and_device_time_take_turns(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    model = torch.compile(mlp().cuda(), backend=dynascope.backend(name="aot_eager"))
    with dynascope.session(str(tmp_path / "run.pfw.gz")):
        for i in range(3):
            with dynascope.region("step", step=i):
                if i == 1:
                    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                        model(torch.randn(64, 16, device="cuda")).sum().backward()
                        torch.cuda.synchronize()
                else:
                    model(torch.randn(64, 16, device="cuda")).sum().backward()
        torch.cuda.synchronize()
    assert any(e.device_type != torch.autograd.DeviceType.CPU for e in prof.events())  # it saw kernels
    gpu = dict(dynascope.summarize_files(str(tmp_path)).by_step.select("step", "gpu_us").iter_rows())
    assert gpu[1] is None and gpu[0] > 0 and gpu[2] > 0
