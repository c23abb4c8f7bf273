"""The training step's torch internals: DataLoader's iterators and workers (capture/training.py), and the
profiler's lowest level for GPU time (capture/device.py).

Part of dynascope._torch, the one home of torch's private APIs (see its __init__)."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

from dynascope._torch.version import moved

# ---------------------------------------------------------------------------------------------
# The training step (capture/training.py): DataLoader internals, which have no public hook for a
# batch. Checked on 2.5.1, 2.8.0, 2.13.0 and 2.15.0 (torch/utils/data/dataloader.py and _utils/worker.py).
# ---------------------------------------------------------------------------------------------


def dataloader_iterator_classes() -> tuple[type, type]:
    """(_BaseDataLoaderIter, _MultiProcessingDataLoaderIter): every DataLoader iterator's `__next__` is
    the base class's; the multi-process one starts the workers in its `__init__` with
    `loader.worker_init_fn` (read there, once per iterator)."""
    module = importlib.import_module("torch.utils.data.dataloader")
    base = getattr(module, "_BaseDataLoaderIter", None)
    multi = getattr(module, "_MultiProcessingDataLoaderIter", None)
    if base is None or multi is None or "__next__" not in vars(base):
        raise moved("torch.utils.data.dataloader._BaseDataLoaderIter.__next__")
    return base, multi


def dataloader_batch_index(iterator: Any) -> int | None:
    """The task index of the batch `__next__` just returned: with workers, `_rcvd_idx - 1` (the index
    the workers were given, in order; with `in_order=False` a batch that arrives early is returned
    before `_rcvd_idx` reaches it, and this names the one it waits for next); without, `_num_yielded - 1`.
    Both restart at 0 for each pass over the loader."""
    try:
        if iterator._num_workers > 0:
            return int(iterator._rcvd_idx) - 1
        return int(iterator._num_yielded) - 1
    except (AttributeError, TypeError, ValueError):
        return None


def dataloader_workers(iterator: Any) -> int:
    """How many worker processes a DataLoader iterator uses (`_num_workers`; 0: it loads in this process)."""
    return int(getattr(iterator, "_num_workers", 0) or 0)


def dataloader_fetcher_classes() -> tuple[type, ...]:
    """The fetchers a DataLoader worker calls once per batch: `fetcher.fetch(index)` in `_worker_loop`."""
    module = importlib.import_module("torch.utils.data._utils.fetch")
    classes = tuple(getattr(module, name, None) for name in ("_MapDatasetFetcher", "_IterableDatasetFetcher"))
    if any(cls is None or "fetch" not in vars(cls) for cls in classes):
        raise moved("torch.utils.data._utils.fetch._MapDatasetFetcher.fetch")
    return classes  # type: ignore[return-value]


def worker_task_index(frame: Any) -> int | None:
    """In a DataLoader worker, the task index of the batch being fetched: the local `idx` of
    `_worker_loop` (`idx, index = r`), the frame that calls `fetcher.fetch(index)`."""
    code = getattr(frame, "f_code", None)
    if code is None or code.co_name != "_worker_loop":
        return None
    try:
        value = frame.f_locals.get("idx")
    except Exception:  # noqa: BLE001 - a frame we cannot read gives no index, never an error in the worker
        return None
    return value if isinstance(value, int) else None


# ---------------------------------------------------------------------------------------------
# GPU time (capture/device.py): torch's profiler (Kineto, with CUPTI on CUDA) started and stopped at its
# lowest level, so that stopping hands over Kineto's raw events without building torch.profiler's Python
# objects for each one. Checked on 2.5.1, 2.8.0, 2.13.0 and 2.15.0 with CPU activity (no GPU here):
# torch.autograd.profiler.profile's _prepare_trace/_start_trace (they build the ProfilerConfig, whose
# arguments change between releases), torch.autograd._disable_profiler, and _KinetoEvent's accessors.
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Activity:
    """One event of torch's profiler: on a device (a kernel, a copy) or on the CPU (a CUDA runtime call)."""

    name: str
    on_device: bool  # ran on the accelerator (else a CPU-side event)
    device: int  # the device's index (CPU events: -1)
    resource: int  # the stream (device events) or the native thread id (CPU events)
    start_ns: int  # epoch nanoseconds
    end_ns: int
    correlation: int  # a kernel and the runtime call that launched it share it (CUPTI's correlation id)


_OWN_PROFILER = "_dynascope_own"  # set on the profiler objects dynascope starts


def start_activity(cuda: bool) -> None:
    """Start torch's profiler: CUDA activity only (kernels, copies, memsets, runtime calls), or, with
    `cuda` False, CPU operator events (what the tests use on machines without a GPU)."""
    profiler = importlib.import_module("torch.autograd.profiler")
    try:
        prof = profiler.profile(use_device="cuda" if cuda else None, use_cpu=not cuda, use_kineto=True)
        setattr(prof, _OWN_PROFILER, True)
        prof._prepare_trace()
        prof._start_trace()
    except AttributeError as exc:
        raise moved("torch.autograd.profiler.profile._prepare_trace/_start_trace", exc) from exc


def watch_other_profilers(before: Callable[[], None], after: Callable[[], None]) -> Callable[[], None]:
    """Call `before` just before a profiler that is not dynascope's starts (torch.profiler.profile and
    torch.autograd.profiler.profile both prepare through torch.autograd.profiler.profile._prepare_trace),
    and `after` once it has stopped (its __exit__). torch runs one profiler at a time, and a second one
    silently takes over the first: this lets dynascope hand its activity over and step aside. Returns
    the function that undoes it (2.5.1 .. 2.15)."""
    cls = importlib.import_module("torch.autograd.profiler").profile
    prepare, leave = getattr(cls, "_prepare_trace", None), getattr(cls, "__exit__", None)
    if prepare is None or leave is None:
        raise moved("torch.autograd.profiler.profile._prepare_trace / __exit__")

    def _prepare_trace(self: Any) -> Any:
        if not getattr(self, _OWN_PROFILER, False) and not getattr(self, "_dynascope_stepped_aside", False):
            self._dynascope_stepped_aside = True
            before()
        return prepare(self)

    def __exit__(self: Any, *exc: Any) -> Any:
        try:
            return leave(self, *exc)
        finally:
            if getattr(self, "_dynascope_stepped_aside", False):
                self._dynascope_stepped_aside = False
                after()

    cls._prepare_trace, cls.__exit__ = _prepare_trace, __exit__

    def undo() -> None:
        cls._prepare_trace, cls.__exit__ = prepare, leave

    return undo


def stop_activity() -> Any:
    """Stop the profiler `start_activity` started (on the same thread); its raw result, for `activities`."""
    autograd = importlib.import_module("torch.autograd")
    disable = getattr(autograd, "_disable_profiler", None)
    if disable is None:
        raise moved("torch.autograd._disable_profiler")
    return disable()


def activities(result: Any) -> list[Activity]:
    """The events of a `stop_activity` result (any thread may read them)."""
    cpu = importlib.import_module("torch.autograd").DeviceType.CPU
    out = []
    for e in result.events():
        on_device = e.device_type() != cpu
        start = int(e.start_ns())
        out.append(Activity(e.name(), on_device, int(e.device_index()) if on_device else -1,
                            int(e.device_resource_id()), start, start + int(e.duration_ns()),
                            int(e.correlation_id())))  # fmt: skip
    return out
