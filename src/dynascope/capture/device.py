"""GPU time: what ran on each device, and which traced op launched it, with nothing added per op.

On CUDA an op event measures the launch on the CPU, not the work on the GPU. While a session records on
a machine with CUDA, torch's profiler collects CUDA activity only (CUPTI: kernels, copies and memsets with
their device intervals, and the runtime calls that launched them; no CPU operator events, so torch adds
no callback per op). At the end of the session, and every `CYCLE_S` seconds at the start of a graph call
on CUDA (`sink`, which the backend gives those graphs in place of buffers.sink), the collected activity
is taken (`ActivitySource.stop`) and handed to the session's writer. The writer turns it into records,
joins each kernel to the op whose interval on the launching thread holds the launch (trace/launches.py),
and writes it as a "gpu" event on a track per device and stream: the program's thread only stops and
restarts the profiler.

Why CUPTI and not CUDA events around each op: an event pair would add two `cudaEventRecord` calls (and
Python) per op to the hot path, and its interval starts when the stream reaches the first event, so on a
GPU that waits for the CPU it counts the wait as the op's time. CUPTI gives each kernel's own start and
end, for aot_eager ops and inductor kernels alike.
`cuda_sync=True` on the backend stays as the fallback that times ops by synchronising.

The source is pluggable (`install(source=...)`): tests use a fake one, and the CPU stand-in that reads
CPU operator events through the same profiler path, on machines without a GPU.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from dynascope import _torch
from dynascope.errors import ConfigError
from dynascope.trace import buffers
from dynascope.trace.buffers import now_ns
from dynascope.trace.launches import DeviceRecord

CYCLE_S = 20.0  # how often the collected activity is handed over while the program runs
Collected = Callable[[], list[DeviceRecord]]  # what a source collected, turned into records when called


class ActivitySource(Protocol):
    def start(self) -> None: ...

    def stop(self) -> Collected:
        """Stop collecting; the records are made when the result is called (by the writer thread)."""
        ...


class CuptiSource:
    """CUDA activity through torch's profiler (Kineto + CUPTI)."""

    def start(self) -> None:
        self.offset_ns = epoch_offset()
        try:
            _torch.start_activity(cuda=True)
        except RuntimeError as exc:  # one profiler at a time: torch.profiler of the program's own, say
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ConfigError(f"torch's profiler would not start ({reason}), so GPU times are not recorded; "
                              "with a profiler of your own running, set DYNASCOPE_DEVICE_TIME=0") from None  # fmt: skip

    def stop(self) -> Collected:
        result, offset = _torch.stop_activity(), self.offset_ns
        return lambda: device_records(_torch.activities(result), offset)


class CpuStandInSource:
    """CPU operator events standing in for kernels, through the same profiler path as CuptiSource: each
    outermost `aten::` op of a thread (or each op named in `names`) is a "kernel" on device 0, stream
    `stream`, launched by its own thread when it began. It lets the join, the summaries and the GPU
    validation run on machines without a GPU (tests, benchmarks/gpu_validation/validate_gpu.py --device cpu)."""

    def __init__(self, names: set[str] | None = None, stream: int = 7) -> None:
        self.names = names
        self.stream = stream
        self.records: list[DeviceRecord] = []

    def start(self) -> None:
        self.offset_ns = epoch_offset()
        _torch.start_activity(cuda=False)

    def stop(self) -> Collected:
        events = _torch.activities(_torch.stop_activity())
        picked = [a for a in events if (a.name in self.names if self.names else a.name.startswith("aten::"))]
        outer: list[_torch.Activity] = []  # an aten op calls others through the dispatcher: keep the outermost
        open_by_thread: dict[int, int] = {}
        for a in sorted(picked, key=lambda a: (a.start_ns, -a.end_ns)):
            if a.start_ns >= open_by_thread.get(a.resource, 0):
                outer.append(a)
                open_by_thread[a.resource] = a.end_ns
        off = self.offset_ns
        self.records = [DeviceRecord(a.name, "kernel", 0, self.stream, a.start_ns - off, a.end_ns - off,
                                     a.resource, a.start_ns - off) for a in outer]  # fmt: skip
        records = self.records
        return lambda: records


def epoch_offset() -> int:
    """Epoch ns less the trace's clock, now. The profiler converts its clock to epoch time with a
    calibration made when it starts; reading the offset then too keeps the two within a microsecond or
    so, where the session's own offset (taken when it opened) drifts with NTP's slewing of the wall clock."""
    return time.time_ns() - now_ns()


def device_records(activities: list[_torch.Activity], offset_ns: int) -> list[DeviceRecord]:
    """Device activities on the trace's clock, each with the launching call's thread (its native id:
    buffers.native_thread_id) and start. The launching call is the earliest CPU-side event with the
    activity's correlation id: CUPTI gives that id to the runtime or driver call (cudaLaunchKernel,
    cuLaunchKernel, cudaGraphLaunch for every kernel of a replayed graph) and also to what ran inside it,
    such as "Lazy Function Loading" on a kernel's first launch, which starts later and may name no thread."""
    launches: dict[int, _torch.Activity] = {}
    for a in activities:
        if not a.on_device and a.correlation:
            first = launches.get(a.correlation)
            if first is None or a.start_ns < first.start_ns:
                launches[a.correlation] = a
    out = []
    for a in activities:
        if not a.on_device:
            continue
        launch = launches.get(a.correlation)
        out.append(DeviceRecord(
            a.name, activity_kind(a.name), a.device, a.resource, a.start_ns - offset_ns, a.end_ns - offset_ns,
            buffers.native_thread_id(launch.resource) if launch else 0, launch.start_ns - offset_ns if launch else 0,
        ))  # fmt: skip
    return out


def activity_kind(name: str) -> str:
    lowered = name.lower()
    if lowered.startswith("memcpy"):
        return "memcpy"
    if lowered.startswith("memset"):
        return "memset"
    return "kernel"


class _Collector:
    def __init__(self, source: ActivitySource, session: Any) -> None:
        self.source = source
        self.session = session
        self.thread = threading.get_ident()  # the profiler is stopped on the thread that started it
        self.due_ns = now_ns() + int(CYCLE_S * 1e9)
        self.paused_ns = 0  # while a profiler of the program's own runs: since when
        self.unwatch: Callable[[], None] = lambda: None

    def take(self, restart: bool) -> None:
        until = now_ns()
        collected = self.source.stop()
        if restart:
            self.source.start()
            self.due_ns = now_ns() + int(CYCLE_S * 1e9)
        self.session.add_device_records(collected, until)


_collector: _Collector | None = None
_lock = threading.Lock()


def installed() -> bool:
    return _collector is not None


def cuda_available() -> bool:
    """Whether this process can run CUDA work (asked only where torch is imported already)."""
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_available())


def install(session: Any = None, source: ActivitySource | None = None) -> None:
    """Collect device activity for `session` (the active one) from `source` (CUDA's, where CUDA is
    available; else nothing is collected)."""
    global _collector
    if source is None:
        if not cuda_available():
            return
        source = CuptiSource()
    if session is None:
        from dynascope.trace.session import current_session

        session = current_session()
    with _lock:
        if _collector is not None or session is None:
            return
        source.start()  # first: a profiler that cannot start (one of the user's runs) leaves nothing kept
        session.collect_launches()
        _collector = _Collector(source, session)
        _collector.unwatch = _torch.watch_other_profilers(_step_aside, _step_back)


def uninstall() -> None:
    """Stop collecting; what was collected goes to the session's writer (its final flush writes it)."""
    global _collector
    with _lock:
        collector, _collector = _collector, None
    if collector is None:
        return
    collector.unwatch()
    if collector.paused_ns:  # what it collected went over when the program's profiler started
        _mark_paused(collector.paused_ns)
        return
    if threading.get_ident() != collector.thread:
        print("dynascope: the session ended on another thread than it started; the GPU activity of its "
              "last stretch is lost", file=sys.stderr)  # fmt: skip
        return
    collector.take(restart=False)


def sink() -> Callable[[object], None]:
    """buffers.sink for graphs that run on CUDA: when CYCLE_S has passed, it first hands over what was
    collected, so that a long run's activity neither piles up in the profiler's buffers nor waits for
    the end to reach the file (on the thread that started collecting; elsewhere it only checks)."""
    collector = _collector
    if collector is not None and now_ns() > collector.due_ns and threading.get_ident() == collector.thread \
            and not collector.paused_ns:  # fmt: skip
        collector.take(restart=True)
    return buffers.sink()


PAUSED = "device time paused"  # the trace's event for a stretch without device activity


def _step_aside() -> None:
    """A profiler of the program's own is about to start, and torch runs one at a time: hand over what
    was collected and stop, so that both profilers see what ran while each was on."""
    collector = _collector
    if collector is None or collector.paused_ns:
        return
    if threading.get_ident() != collector.thread:
        _note("a profiler started on another thread than the one that started dynascope's; it takes over, "
              "and the GPU activity from here on is not in the trace")  # fmt: skip
        return
    collector.take(restart=False)
    collector.paused_ns = now_ns()
    _note("GPU times pause while the program's own profiler runs; the trace marks the stretch "
          f"({PAUSED!r}) and gives its steps no GPU figures")  # fmt: skip


def _step_back() -> None:
    """The program's profiler has stopped: collect again, and mark the stretch it had."""
    collector = _collector
    if collector is None or not collector.paused_ns or threading.get_ident() != collector.thread:
        return
    start, collector.paused_ns = collector.paused_ns, 0
    _mark_paused(start)
    try:
        collector.source.start()
    except ConfigError as exc:
        collector.paused_ns = now_ns()  # nothing to stop at the end
        _note(str(exc))
    collector.due_ns = now_ns() + int(CYCLE_S * 1e9)


def _mark_paused(since_ns: int) -> None:
    buffers.emit(("P", PAUSED, "dynascope", since_ns, now_ns(), {"kind": "device_paused"}))


_noted: set[str] = set()


def _note(text: str) -> None:
    if text not in _noted:
        _noted.add(text)
        print(f"dynascope: {text}", file=sys.stderr)


def _forget_in_child() -> None:
    """A forked child does not own its parent's profiler: it neither stops it nor hands over its activity."""
    global _collector
    _collector = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
