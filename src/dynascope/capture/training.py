"""Automatic events for the whole training step: data loading, backward, optimizer, torch.save/load.

A trace session installs them when it opens (where torch is imported; otherwise at the first compile)
and removes them when it closes. Public torch APIs where there are any:

- `optimizer.step`: the global step hooks (`torch.optim.optimizer.register_optimizer_step_pre_hook` and
  `..._post_hook`); the event is written after the step, so a step that raises leaves none;
- `optimizer.zero_grad` / `module.zero_grad`: `torch.optim.Optimizer.zero_grad`, `torch.nn.Module.zero_grad`;
- `backward`: `torch.autograd.backward`, which `Tensor.backward` calls;
- `torch.save` / `torch.load`: those functions, with the path and the bytes;
- `dataloader.next` (main process) and `dataloader.fetch` (each worker, in the worker's own file): the
  DataLoader has no public per-batch hook, so its iterator's `__next__`, the workers' start and their
  fetcher are reached through `_torch.py`. Workers started by spawn or forkserver open their own trace
  file from `worker_init_fn` (wrapped while the iterator starts its workers, then put back).

Every wrapper calls straight through while torch.compile traces it (`torch.compiler.is_compiling()`),
so Dynamo sees the functions it saw before, and no wrapper changes arguments, results or exceptions.
Events are region begin/end records (trace/buffers.py `emit`), so that what runs inside them (graph
calls in `backward`, file reads in a batch fetch) nests in them; the optimizer's step and zero_grad,
which nothing nests in, are one complete record each, written when they return.
"""

from __future__ import annotations

import functools
import itertools
import os
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch

from dynascope import _torch
from dynascope.trace import session as _session
from dynascope.trace.buffers import emit, now_ns
from dynascope.trace.format import AUTOGRAD_CAT, DATA_CAT, OPTIMIZER_CAT, TORCH_IO_CAT

__all__ = ["WorkerStart", "install", "install_worker", "installed", "uninstall"]

_lock = threading.Lock()
_undo: list[Callable[[], None]] = []  # what install() changed, each with the call that puts it back
_loader_keys = itertools.count(1)
_optimizer_numbers: dict[int, tuple[weakref.ref, dict]] = {}  # id(optimizer) -> (it, its event args)
_step_started: dict[int, int] = {}  # id(optimizer) -> clock at its pre-hook
_worker: dict[str, Any] = {}  # in a DataLoader worker: its loader key and worker id
_is_compiling = torch.compiler.is_compiling
_NO_ARGS: dict = {}  # shared by every event without args of its own (the decoder only reads it)


def installed() -> bool:
    return bool(_undo)


def install(io: bool = True) -> None:
    """Patch the step entry points and register the optimizer hooks (again: nothing). `io=False`
    (DFTRACER_DISABLE_IO) leaves torch.save/torch.load alone: they are file I/O."""
    with _lock:
        if _undo:
            return
        _install_optimizer()
        _install_backward()
        if io:
            _install_serialization()
        _install_dataloader()


def uninstall() -> None:
    """Put back everything install() changed."""
    with _lock:
        while _undo:
            _undo.pop()()


def _replace(owner: Any, name: str, make: Callable[[Any], Any]) -> None:
    """owner.name = make(original), undone by uninstall()."""
    original = getattr(owner, name)
    setattr(owner, name, make(original))
    _undo.append(lambda: setattr(owner, name, original))


# -- optimizer ------------------------------------------------------------------------------------


def _optimizer_args(optimizer: Any) -> dict:
    """{"optimizer": its class name, "opt": its number in this process}, made once per optimizer."""
    known = _optimizer_numbers.get(id(optimizer))
    if known is None or known[0]() is not optimizer:  # a new optimizer (perhaps at a dead one's address)
        args = {"optimizer": type(optimizer).__name__, "opt": len(_optimizer_numbers) + 1}
        known = _optimizer_numbers[id(optimizer)] = (weakref.ref(optimizer), args)
    return known[1]


def _before_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    if not _is_compiling():
        _step_started[id(optimizer)] = now_ns()


def _after_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    if _is_compiling():
        return
    start = _step_started.pop(id(optimizer), None)
    if start is not None:
        emit(("P", "optimizer.step", OPTIMIZER_CAT, start, now_ns(), _optimizer_args(optimizer)))


def _install_optimizer() -> None:
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    pre = register_optimizer_step_pre_hook(_before_step)
    post = register_optimizer_step_post_hook(_after_step)
    _undo.append(pre.remove)
    _undo.append(post.remove)

    def optimizer_zero_grad(original: Callable) -> Callable:
        @functools.wraps(original)
        def zero_grad(self: Any, *args: Any, **kwargs: Any) -> Any:
            if _is_compiling():
                return original(self, *args, **kwargs)
            start = now_ns()  # nothing nests in it: one complete event, written when it returns
            try:
                return original(self, *args, **kwargs)
            finally:
                emit(("P", "optimizer.zero_grad", OPTIMIZER_CAT, start, now_ns(), _optimizer_args(self)))

        return zero_grad

    def module_zero_grad(original: Callable) -> Callable:
        @functools.wraps(original)
        def zero_grad(self: Any, *args: Any, **kwargs: Any) -> Any:
            if _is_compiling():
                return original(self, *args, **kwargs)
            start = now_ns()
            try:
                return original(self, *args, **kwargs)
            finally:
                emit(("P", "module.zero_grad", OPTIMIZER_CAT, start, now_ns(), {"module": type(self).__name__}))

        return zero_grad

    _replace(torch.optim.Optimizer, "zero_grad", optimizer_zero_grad)
    _replace(torch.nn.Module, "zero_grad", module_zero_grad)


# -- backward -------------------------------------------------------------------------------------


def _install_backward() -> None:
    def traced(original: Callable) -> Callable:
        @functools.wraps(original)
        def backward(*args: Any, **kwargs: Any) -> Any:
            if _is_compiling():
                return original(*args, **kwargs)
            emit(("B", "backward", AUTOGRAD_CAT, _NO_ARGS, now_ns()))
            try:
                return original(*args, **kwargs)
            finally:
                emit(("E", now_ns()))

        return backward

    _replace(torch.autograd, "backward", traced)


# -- torch.save / torch.load ----------------------------------------------------------------------


def _path_of(f: Any) -> str | None:
    if isinstance(f, (str, os.PathLike)):
        return os.path.abspath(os.fspath(f))
    name = getattr(f, "name", None)
    return os.path.abspath(name) if isinstance(name, str) else None


def _position(f: Any) -> int | None:
    if isinstance(f, (str, os.PathLike)):
        return None
    try:
        return int(f.tell())
    except Exception:  # noqa: BLE001 - a stream without a position: no byte count
        return None


def _size(path: str | None) -> int | None:
    try:
        return os.path.getsize(path) if path else None
    except OSError:
        return None


def _serialization(name: str, file_arg: int) -> Callable[[Callable], Callable]:
    def traced(original: Callable) -> Callable:
        @functools.wraps(original)
        def call(*args: Any, **kwargs: Any) -> Any:
            if _is_compiling():
                return original(*args, **kwargs)
            f = args[file_arg] if len(args) > file_arg else kwargs.get("f")
            path = _path_of(f)
            details: dict[str, Any] = {"bytes": None}
            if path:
                details["__path"] = path
            before = _position(f)
            emit(("B", name, TORCH_IO_CAT, details, now_ns()))
            try:
                return original(*args, **kwargs)
            finally:
                size = _size(path)  # a file's size says what it holds; a stream's position, what went by
                after = _position(f) if size is None else None
                details["bytes"] = (
                    size if size is not None else (after - before if before is not None and after is not None else None)
                )
                emit(("E", now_ns()))

        return call

    return traced


def _install_serialization() -> None:
    from torch import serialization

    for name, file_arg in (("save", 1), ("load", 0)):
        original = getattr(torch, name)
        traced = _serialization(f"torch.{name}", file_arg)(original)
        for owner in (torch, serialization):
            if getattr(owner, name) is original:
                setattr(owner, name, traced)
                _undo.append(functools.partial(setattr, owner, name, original))


# -- DataLoader -----------------------------------------------------------------------------------


def _loader_key(iterator: Any) -> int:
    key = iterator.__dict__.get("_dynascope_loader")
    if key is None:
        key = iterator.__dict__["_dynascope_loader"] = next(_loader_keys)
    return key


def _install_dataloader() -> None:
    base, multi = _torch.dataloader_iterator_classes()

    def traced_next(original: Callable) -> Callable:
        @functools.wraps(original)
        def __next__(self: Any) -> Any:
            if _is_compiling():
                return original(self)
            details = {"loader": _loader_key(self), "batch": None, "workers": _torch.dataloader_workers(self)}
            emit(("B", "dataloader.next", DATA_CAT, details, now_ns()))
            try:
                data = original(self)
                details["batch"] = _torch.dataloader_batch_index(self)
                return data
            finally:
                emit(("E", now_ns()))

        return __next__

    def traced_init(original: Callable) -> Callable:
        @functools.wraps(original)
        def __init__(self: Any, loader: Any, *args: Any, **kwargs: Any) -> None:
            spec = _session.child_spec()
            if spec is None or _is_compiling():
                original(self, loader, *args, **kwargs)
                return
            user_fn = loader.worker_init_fn
            loader.worker_init_fn = WorkerStart(user_fn, _loader_key(self), spec)
            try:
                original(self, loader, *args, **kwargs)
            finally:
                loader.worker_init_fn = user_fn

        return __init__

    _replace(base, "__next__", traced_next)
    _replace(multi, "__init__", traced_init)


class WorkerStart:
    """The `worker_init_fn` a traced DataLoader's workers run first: it makes sure the worker traces
    (a spawned worker opens its own file like the parent's), installs the fetch events, then calls
    the user's own `worker_init_fn`. Picklable, as spawn needs."""

    def __init__(self, user_fn: Callable[[int], Any] | None, loader: int, spec: tuple) -> None:
        self.user_fn = user_fn
        self.loader = loader
        self.spec = spec

    def __call__(self, worker_id: int) -> Any:
        try:
            if _session.open_in_child(self.spec) is not None:
                install_worker(self.loader, worker_id)
        except Exception as exc:  # noqa: BLE001 - the worker loads data untraced rather than failing
            print(f"dynascope: DataLoader worker {worker_id} runs untraced: {exc}", file=sys.stderr)
        if self.user_fn is not None:
            return self.user_fn(worker_id)
        return None


def install_worker(loader: int, worker_id: int) -> None:
    """In a DataLoader worker: one `dataloader.fetch` event per batch, named by the same loader key and
    batch index as the main process's `dataloader.next` that receives it."""
    active = _session.current_session()
    install(io=not (active is not None and active.config.disable_io))
    _worker.update(loader=loader, worker=worker_id)
    with _lock:
        if _worker.get("fetch_installed"):
            return
        _worker["fetch_installed"] = True
        for cls in _torch.dataloader_fetcher_classes():
            _replace(cls, "fetch", _traced_fetch)


def _traced_fetch(original: Callable) -> Callable:
    @functools.wraps(original)
    def fetch(self: Any, possibly_batched_index: Any) -> Any:
        batch = _torch.worker_task_index(sys._getframe(1))
        details = {"loader": _worker.get("loader"), "batch": batch, "worker": _worker.get("worker")}
        emit(("B", "dataloader.fetch", DATA_CAT, details, now_ns()))
        try:
            return original(self, possibly_batched_index)
        finally:
            emit(("E", now_ns()))

    return fetch
