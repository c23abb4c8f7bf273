"""GPU time: what ran on each device, and which traced op launched it, with nothing added per op.

On CUDA an op event measures the launch on the CPU, not the work on the GPU. While a session records on
a machine with CUDA, torch's profiler collects CUDA activity only (CUPTI: kernels, copies and memsets with
their device intervals, and the runtime calls that launched them; no CPU operator events, so torch adds
no callback per op). At the end of the session, and every `CYCLE_S` seconds at an optimizer step, the
collected activity is taken (`ActivitySource.stop`) and handed to the session's writer, which joins each
kernel to the op whose interval on the launching thread holds the launch (trace/launches.py) and writes
it as a "gpu" event on a track per device and stream.

Why CUPTI and not CUDA events around each op: an event pair would add two `cudaEventRecord` calls (and
Python) per op to the hot path, and its interval starts when the stream reaches the first event, so on a
GPU that waits for the CPU it counts the wait as the op's time. CUPTI gives each kernel's own start and
end, launches and all, for aot_eager ops, inductor kernels and CUDA-graph replays alike.
`cuda_sync=True` on the backend stays as the fallback that times ops by synchronising.

The source is pluggable (`install(source=...)`): tests use a fake one, and the CPU stand-in that reads
CPU operator events through the same profiler path, on machines without a GPU.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Protocol

from .. import _torch
from ..trace.buffers import now_ns
from ..trace.launches import DeviceRecord

CYCLE_S = 20.0  # how often the collected activity is taken and written, at an optimizer step


class ActivitySource(Protocol):
    def start(self) -> None: ...

    def stop(self) -> list[DeviceRecord]: ...


class CuptiSource:
    """CUDA activity through torch's profiler (Kineto + CUPTI)."""

    def start(self) -> None:
        self.offset_ns = epoch_offset()
        _torch.start_activity(cuda=True)

    def stop(self) -> list[DeviceRecord]:
        return device_records(_torch.stop_activity(), self.offset_ns)


def epoch_offset() -> int:
    """Epoch ns less the trace's clock, now. The profiler converts its clock to epoch time with a
    calibration made when it starts; reading the offset then too keeps the two within a microsecond or
    so, where the session's own offset (taken when it opened) drifts with NTP's slewing of the wall clock."""
    return time.time_ns() - now_ns()


def device_records(activities: list[_torch.Activity], offset_ns: int) -> list[DeviceRecord]:
    """Device activities on the trace's clock, each with the launching runtime call's thread and start
    (the call with the same correlation id)."""
    launches = {a.correlation: a for a in activities if not a.on_device and a.correlation}
    out = []
    for a in activities:
        if not a.on_device:
            continue
        launch = launches.get(a.correlation)
        out.append(DeviceRecord(
            a.name, activity_kind(a.name), a.device, a.resource, a.start_ns - offset_ns, a.end_ns - offset_ns,
            launch.resource if launch else 0, launch.start_ns - offset_ns if launch else 0,
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
        self.started_ns = now_ns()
        self.hook: Any = None

    def take(self, restart: bool) -> None:
        until = now_ns()
        records = self.source.stop()
        if restart:
            self.source.start()
            self.started_ns = now_ns()
        self.session.add_device_records(records, until)


_collector: _Collector | None = None
_lock = threading.Lock()


def installed() -> bool:
    return _collector is not None


def cuda_in_use() -> bool:
    """Whether this process can run CUDA work (never initialises CUDA where torch has not)."""
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_available())


def install(session: Any = None, source: ActivitySource | None = None) -> None:
    """Collect device activity for `session` (the active one) from `source` (CUDA's, where CUDA is
    available; else nothing is collected)."""
    global _collector
    if source is None:
        if not cuda_in_use():
            return
        source = CuptiSource()
    if session is None:
        from ..trace.session import current_session

        session = current_session()
    with _lock:
        if _collector is not None or session is None:
            return
        session.collect_launches()
        source.start()
        _collector = _Collector(source, session)
        _collector.hook = _cycle_at_optimizer_steps()


def uninstall() -> None:
    """Stop collecting; what was collected goes to the session's writer (its final flush writes it)."""
    global _collector
    with _lock:
        collector, _collector = _collector, None
    if collector is None:
        return
    if collector.hook is not None:
        collector.hook.remove()
    if threading.get_ident() != collector.thread:
        print("dynascope: the session ended on another thread than it started; the GPU activity of its "
              "last stretch is lost", file=sys.stderr)  # fmt: skip
        return
    collector.take(restart=False)


def cycle() -> None:
    """Hand over what was collected so far and go on collecting (on the thread that started)."""
    collector = _collector
    if collector is not None and threading.get_ident() == collector.thread:
        collector.take(restart=True)


def _cycle_at_optimizer_steps() -> Any:
    """Every CYCLE_S seconds, at the end of an optimizer step: so that a long run's activity does not
    pile up in the profiler's buffers, and the trace file has it while the run goes on."""
    torch = sys.modules.get("torch")
    optim = getattr(torch, "optim", None) if torch is not None else None
    register = getattr(getattr(optim, "optimizer", None), "register_optimizer_step_post_hook", None)
    if register is None:
        return None

    def after_step(*_: Any) -> None:
        collector = _collector
        if collector is not None and now_ns() - collector.started_ns > CYCLE_S * 1e9:
            cycle()

    return register(after_step)
