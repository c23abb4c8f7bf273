"""Collective events: every torch.distributed collective this process issues from Python, and DDP's
gradient buckets, as `cat "comm"` events (docs/trace-format.md, "Collective events").

A trace session installs them where torch is imported (trace/session.py) and removes them when it closes.

- Explicit collectives: the torch.distributed functions (all_reduce, all_gather_into_tensor, broadcast,
  barrier, send, isend, ...) are replaced, in `torch.distributed` and `torch.distributed.distributed_c10d`,
  by wrappers that call the original with the same arguments and return what it returns. Each writes an
  issue marker (`dur` 0, `state` "issued") before the call, and the complete event when this process sees
  the collective complete: a blocking call's return, or for `async_op=True` (isend, irecv,
  batch_isend_irecv) the callback of the returned Work's future (`get_future().then`), or, where the
  backend gives no future (gloo's point-to-point ops), the return of the Work's `wait()`. A collective
  issued inside another one's wrapper (all_gather_into_tensor calling all_gather_single on 2.13) is the
  outer one's event. The caller names the source: torch.distributed.fsdp "fsdp", torch.nn.parallel and the
  DDP comm hooks "ddp", anything else "explicit".
- DDP buckets: DDP's reducer all-reduces its buckets in C++, which no Python wrapper sees; dynascope gives
  each DistributedDataParallel made while tracing one comm hook of its own (the public comm-hook
  mechanism, `DistributedDataParallel.register_comm_hook`; torch has no other way to see a bucket's
  all-reduce with its completion on gloo). It does what DDP does without a hook (scale the bucket by
  1/world size, all-reduce it, hand back the result), or, once the program registers a hook of its own
  (or a built-in one), calls that instead; either way the bucket's collectives are events with source
  "ddp" and the bucket's index, parameter count and first..last parameter names. Skipped where
  compiled autograd's Python reducer (torch._dynamo.config.optimize_ddp == "python_reducer") does the
  reducing.
- Tracks: a blocking collective's events are on the calling thread; an async one's complete event is
  written on a lane (`_Lanes`), a thread of dynascope's holding one collective at a time, because async
  collectives in flight together overlap and events on one thread must nest.
- `in_flight()`: the collectives issued and not yet completed, for the record a cut trace ends with.

Every wrapper calls straight through while torch.compile traces (Dynamo rewrites it to the functional
collective it rewrites the original to, and skips what it skips: `_torch.dynamo_treats_like`).
"""

from __future__ import annotations

import collections
import functools
import itertools
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import torch

from dynascope import _torch
from dynascope.trace import buffers
from dynascope.trace import session as _session
from dynascope.trace.buffers import emit, now_ns

__all__ = ["in_flight", "install", "installed", "uninstall"]

# function name -> (event name, the argument whose tensor bytes are counted, or "" for none)
_FUNCTIONS: dict[str, tuple[str, str]] = {
    "all_reduce": ("all_reduce", "tensor"),
    "all_gather": ("all_gather", "tensor"),
    "all_gather_into_tensor": ("all_gather_into_tensor", "input_tensor"),
    "all_gather_single": ("all_gather_into_tensor", "input_tensor"),  # 2.13's name for the same collective
    "reduce_scatter": ("reduce_scatter", "input_list"),
    "reduce_scatter_tensor": ("reduce_scatter_tensor", "input"),
    "reduce_scatter_single": ("reduce_scatter_tensor", "input"),
    "broadcast": ("broadcast", "tensor"),
    "reduce": ("reduce", "tensor"),
    "barrier": ("barrier", ""),
    "all_to_all_single": ("all_to_all_single", "input"),
    "all_to_all": ("all_to_all", "input_tensor_list"),
    "gather": ("gather", "tensor"),
    "scatter": ("scatter", "tensor"),
    "send": ("send", "tensor"),
    "recv": ("recv", "tensor"),
    "isend": ("isend", "tensor"),
    "irecv": ("irecv", "tensor"),
}
_ALWAYS_ASYNC = {"isend", "irecv"}
_SOURCES = (("torch.distributed.fsdp", "fsdp"), ("torch.distributed._composable.fsdp", "fsdp"),  # 2.5's FSDP2
            ("torch.nn.parallel", "ddp"), ("torch.distributed.algorithms.ddp_comm_hooks", "ddp"))  # fmt: skip

_lock = threading.Lock()
_undo: list[Callable[[], None]] = []
_is_compiling = torch.compiler.is_compiling
_recording = buffers.recording
_tokens = itertools.count(1)
_pending: dict[int, tuple] = {}  # token -> (op, its issue marker's args, issue clock) while in flight
_groups: dict[int, tuple] = {}  # id(group) -> (group, name, size, sequence reader or None)
_source_of_module: dict[str, str] = {}
_waiting: dict[int, tuple] = {}  # id(work) -> (its weakref, completion) for Works without a future
_wait_patched: set[type] = set()
_warned: set[str] = set()


class _Local(threading.local):
    inside = False  # in a wrapper already: an inner collective is the outer one's
    bucket: dict | None = None  # in dynascope's DDP comm hook: the bucket's event args
    tid = 0


_tls = _Local()


def installed() -> bool:
    return bool(_undo)


def install() -> None:
    """Wrap the collectives and DDP's comm-hook registration (again: nothing)."""
    with _lock:
        if _undo:
            return
        import torch.distributed as dist

        if not dist.is_available():
            _undo.append(lambda: None)
            return
        _pending.clear()  # what an earlier session left in flight is that session's
        _install_functions(dist)
        _install_ddp()
        _keep_process_groups(dist)
        _report_on_cut()


def _report_on_cut() -> None:
    """Name the collectives in flight in the record a trace cut by a signal ends with (once a process)."""
    register = getattr(_session, "add_cut_reporter", None)
    if register is not None:
        register(in_flight)  # once: it keeps one of each


def uninstall() -> None:
    """Put back everything install() changed. DDP models keep dynascope's comm hook (a reducer takes one
    hook for its life); untraced, it does exactly what it did before, with no events."""
    _lanes.drain()  # the session stops recording next
    with _lock:
        while _undo:
            _undo.pop()()
        _groups.clear()
        if _kept:
            time.sleep(0.2)  # the GIL released: Gloo's threads finish destroying their callbacks
            _kept.clear()


# -- process groups held while tracing ------------------------------------------------------------

_kept: list = []  # the process groups made while tracing, let go at uninstall


def _keep_process_groups(dist: Any) -> None:
    """Hold every process group made while tracing until the session ends.

    Why: a collective event of an async collective (and every DDP bucket's) comes from a Python callback
    on its Work's future. Gloo's thread runs such a callback and then destroys it, which takes the GIL.
    When the program's last reference to a group goes (DDP's reducer, as `main()` returns), the group's
    destructor joins that thread while the main thread holds the GIL: if the thread is just then
    destroying a callback, both wait forever (seen: a rank hanging at exit after its last line, gdb showing
    ~ProcessGroupGloo joining pt_gloo_runloop, which waits for the GIL). Held here, the groups die at
    uninstall, after a sleep that lets their threads finish."""
    c10d = dist.distributed_c10d
    for owner in (dist, c10d):
        for name, world in (("init_process_group", True), ("new_group", False)):
            original: Any = getattr(owner, name, None)
            if original is None or getattr(original, "_dynascope_keeps", False):
                continue
            keeping = _keeping(original, dist, world)
            setattr(owner, name, keeping)
            _undo.append(functools.partial(setattr, owner, name, original))


def _keeping(original: Callable, dist: Any, world: bool) -> Callable:
    @functools.wraps(original)
    def keep(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        try:
            group = dist.group.WORLD if world else result
            if group is not None and all(g is not group for g in _kept):
                _kept.append(group)
        except Exception:  # noqa: BLE001 - nothing kept: only the hang at exit this guards against returns
            pass
        return result

    keep._dynascope_keeps = True  # type: ignore[attr-defined]
    return keep


def in_flight() -> list[dict]:
    """The collectives issued and not completed, oldest first: op, pg, seq, bytes, source, issued_us
    (epoch microseconds, as the trace's ts)."""
    active = _session.current_session()
    offset = active.offset_ns if active is not None else time.time_ns() - now_ns()
    items = sorted(_pending.items(), key=lambda item: item[0])
    return [
        {"op": op, "pg": args["pg"], "seq": args["seq"], "bytes": args["bytes"], "source": args["source"],
         "issued_us": (start + offset) // 1000}
        for _, (op, args, start) in items
    ]  # fmt: skip


# -- explicit collectives -------------------------------------------------------------------------


def _install_functions(dist: Any) -> None:
    c10d = dist.distributed_c10d
    for name, (event, tensor_arg) in _FUNCTIONS.items():
        original: Any = getattr(c10d, name, None)
        if original is None:
            continue
        wrapper = _wrap(original, event, tensor_arg, name in _ALWAYS_ASYNC)
        for owner in (dist, c10d):
            if getattr(owner, name, None) is original:
                setattr(owner, name, wrapper)
                _undo.append(functools.partial(setattr, owner, name, original))
        _undo.append(_torch.dynamo_treats_like(wrapper, original))
        _torch.skip_frames_recursively(wrapper)  # run after a graph break: skipped, as torch's own is
    destroy = c10d.destroy_process_group

    @functools.wraps(destroy)
    def destroy_process_group(*args: Any, **kwargs: Any) -> Any:
        _groups.clear()  # a group made later may take a destroyed one's address, or be the new default
        return destroy(*args, **kwargs)

    for owner in (dist, c10d):
        if getattr(owner, "destroy_process_group", None) is destroy:
            owner.destroy_process_group = destroy_process_group
            _undo.append(functools.partial(setattr, owner, "destroy_process_group", destroy))
    _undo.append(_torch.dynamo_treats_like(destroy_process_group, destroy))
    _torch.skip_frames_recursively(destroy_process_group)
    original = getattr(c10d, "batch_isend_irecv", None)
    if original is not None:
        wrapper = _wrap_batch(original)
        for owner in (dist, c10d):
            if getattr(owner, "batch_isend_irecv", None) is original:
                owner.batch_isend_irecv = wrapper
                _undo.append(functools.partial(setattr, owner, "batch_isend_irecv", original))
        _undo.append(_torch.dynamo_treats_like(wrapper, original))
        _torch.skip_frames_recursively(wrapper)


def _positions(original: Callable, *names: str) -> list[int]:
    import inspect

    params = list(inspect.signature(original).parameters)
    return [params.index(n) if n in params else -1 for n in names]


def _argument(args: tuple, kwargs: dict, at: int, name: str) -> Any:
    if 0 <= at < len(args):
        return args[at]
    return kwargs.get(name)


def _nbytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.nbytes
    if isinstance(value, (list, tuple)):
        return sum(t.nbytes for t in value if isinstance(t, torch.Tensor))
    return 0


def _group(group: Any) -> tuple:
    """(group, name, size, sequence reader) of a process group; None, the default group, is remembered as
    None until a process group is destroyed (a wrapper of destroy_process_group forgets them all)."""
    given = group
    if group is None:
        import torch.distributed as dist

        group = dist.group.WORLD
    known = _groups.get(id(group))
    if known is not None and known[0] is group:
        if given is None:
            _groups[id(None)] = (None, *known[1:])
        return known
    try:
        name, size, reader = str(group.group_name), int(group.size()), _torch.sequence_reader(group)
    except Exception:  # noqa: BLE001 - not a process group (torch raises its own error from the call)
        name, size, reader = str(group), -1, None
    known = _groups[id(group)] = (group, name, size, reader)
    if given is None:
        _groups[id(None)] = (None, name, size, reader)
    return known


def _source(frame: Any) -> str:
    module = frame.f_globals.get("__name__", "")
    return _source_of_module.get(module) or _source_named(module)


def _source_named(module: str) -> str:
    source = _source_of_module[module] = next((s for prefix, s in _SOURCES if module.startswith(prefix)), "explicit")
    return source


def _thread_id() -> int:
    tid = _tls.tid
    if not tid:
        tid = _tls.tid = threading.get_native_id()
    return tid


def _wrap(original: Callable, event: str, tensor_arg: str, always_async: bool) -> Callable:
    tensor_at, group_at, async_at = _positions(original, tensor_arg, "group", "async_op")
    tensor_at = tensor_at if tensor_arg else -1
    pending = _pending
    groups = _groups
    tls = _tls
    recording = _recording
    is_compiling = _is_compiling
    getframe = sys._getframe
    sources = _source_of_module
    tokens = _tokens

    @functools.wraps(original)
    def collective(*args: Any, **kwargs: Any) -> Any:
        if tls.inside or not recording() or is_compiling():
            return original(*args, **kwargs)
        n = len(args)
        group = args[group_at] if 0 <= group_at < n else kwargs.get("group")
        known = groups.get(id(group))
        if known is None or known[0] is not group:
            known = _group(group)
        _, pg, size, read_seq = known
        if tensor_at < 0:
            nbytes = 0
        else:
            tensor = args[tensor_at] if tensor_at < n else kwargs.get(tensor_arg)
            nbytes = tensor.nbytes if isinstance(tensor, torch.Tensor) else _nbytes(tensor)
        is_async = always_async or bool(args[async_at] if 0 <= async_at < n else kwargs.get("async_op"))
        bucket = tls.bucket
        if bucket is None:
            module = getframe(1).f_globals.get("__name__", "")
            source = sources.get(module) or _source_named(module)
        else:
            source = "ddp"
        seq = read_seq() + 1 if read_seq is not None else -1
        itid = tls.tid or _thread_id()
        issued = {"pg": pg, "seq": seq, "bytes": nbytes, "group_size": size, "source": source,
                  "async": 1 if is_async else 0, "state": "issued", "itid": itid}  # fmt: skip
        if bucket is not None:
            issued.update(bucket)
        token = next(tokens)
        lane = _lanes.take() if is_async else None  # before the issue: its lane is free from then on
        start = now_ns()
        emit(("P", event, "comm", start, start, issued))
        pending[token] = (event, issued, start)
        tls.inside = True
        try:
            result = original(*args, **kwargs)
        except BaseException:
            tls.inside = False
            _finish(token, event, start, issued, "error", read_seq, lane=lane)
            raise
        tls.inside = False
        if lane is not None:
            _when_complete([result] if result is not None else [], token, event, start, issued, read_seq, lane)
            return result
        end = now_ns()
        del pending[token]
        done = issued.copy()  # the marker's dict is the writer's from now on: a new one
        done["state"] = "done"
        if read_seq is not None:
            done["seq"] = read_seq()
        emit(("P", event, "comm", start, end, done))
        return result

    return collective


def _wrap_batch(original: Callable) -> Callable:
    @functools.wraps(original)
    def batch_isend_irecv(p2p_op_list: Any, *args: Any, **kwargs: Any) -> Any:
        tls = _tls
        if tls.inside or not _recording() or _is_compiling() or not p2p_op_list:
            return original(p2p_op_list, *args, **kwargs)
        _, pg, size, read_seq = _group(getattr(p2p_op_list[0], "group", None))
        issued = {
            "pg": pg, "seq": read_seq() + 1 if read_seq is not None else -1,
            "bytes": sum(_nbytes(getattr(op, "tensor", None)) for op in p2p_op_list), "group_size": size,
            "source": _source(sys._getframe(1)), "async": 1, "state": "issued", "itid": _thread_id(),
        }  # fmt: skip
        token = next(_tokens)
        lane = _lanes.take()
        start = now_ns()
        emit(("P", "batch_isend_irecv", "comm", start, start, issued))
        _pending[token] = ("batch_isend_irecv", issued, start)
        tls.inside = True
        try:
            works = original(p2p_op_list, *args, **kwargs)
        except BaseException:
            _finish(token, "batch_isend_irecv", start, issued, "error", read_seq, lane=lane)
            raise
        finally:
            tls.inside = False
        _when_complete([w for w in works or () if w is not None], token, "batch_isend_irecv", start, issued,
                       read_seq, lane)  # fmt: skip
        return works

    return batch_isend_irecv


def _finish(
    token: int,
    event: str,
    start: int,
    issued: dict,
    state: str,
    read_seq: Any,
    seq: int | None = None,
    lane: int | None = None,
) -> None:
    end = now_ns()
    _pending.pop(token, None)
    done = dict(issued)
    done["state"] = state
    if seq is not None:
        done["seq"] = seq
    elif read_seq is not None:
        try:
            done["seq"] = read_seq()
        except Exception:  # noqa: BLE001 - a destroyed group: the number it was issued with
            pass
    record = ("P", event, "comm", start, end, done)
    if lane is None:
        emit(record)
    else:
        _lanes.write(lane, record)


class _Lanes:
    """Where the complete events of async collectives are written: collectives in flight together overlap
    in time, and events on one thread of a trace must nest, so each goes to a lane, a small thread of
    dynascope's ("dynascope comm lane N") that writes it on its own track. A lane holds one collective
    from its issue to its completion, so a lane's events never overlap; lanes are taken lowest first. A
    completion only appends its record to the lane's box; the lane's thread, woken once, writes what
    came in the next few milliseconds together (a wake-up per record cost more than the record)."""

    BATCH_S = 0.005

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.busy: list[bool] = []
        self.boxes: list[collections.deque] = []
        self.wakes: list[threading.Event] = []
        self.threads: list[threading.Thread] = []
        self.unwritten = 0

    def take(self) -> int:
        with self.lock:
            for lane, busy in enumerate(self.busy):
                if not busy and self.threads[lane].is_alive():
                    self.busy[lane] = True
                    return lane
            lane = len(self.busy)
            self.busy.append(True)
            self.boxes.append(collections.deque())
            self.wakes.append(threading.Event())
            name = f"dynascope comm lane {lane + 1}"
            thread = threading.Thread(target=self._run, args=(lane,), name=name, daemon=True)
            self.threads.append(thread)
            thread.start()
            return lane

    def write(self, lane: int, record: tuple) -> None:
        with self.lock:
            self.unwritten += 1
            self.busy[lane] = False  # its next collective is issued after this one completed
        self.boxes[lane].append(record)
        wake = self.wakes[lane]
        if not wake.is_set():
            wake.set()

    def _run(self, lane: int) -> None:
        box, wake = self.boxes[lane], self.wakes[lane]
        while True:
            wake.wait()
            time.sleep(self.BATCH_S)
            wake.clear()  # a record appended from here on sets it again
            while box:
                record = box.popleft()
                try:
                    emit(record)
                finally:
                    with self.lock:
                        self.unwritten -= 1

    def drain(self, timeout_s: float = 1.0) -> None:
        """Wait (a little) until every complete event handed to a lane is written: before the session stops
        recording."""
        deadline = time.monotonic() + timeout_s
        while self.unwritten > 0 and time.monotonic() < deadline:
            time.sleep(0.001)

    def after_fork(self) -> None:
        self.__init__()  # type: ignore[misc]  # the parent's lane threads are not in the child


_lanes = _Lanes()
os.register_at_fork(after_in_child=_lanes.after_fork)


def _when_complete(works: list, token: int, event: str, start: int, issued: dict, read_seq: Any, lane: int) -> None:
    """Write the complete event once every Work in `works` has completed (no Work: now), on `lane`."""
    seq = issued["seq"]
    if read_seq is not None:
        try:
            seq = read_seq()  # right after issuing: this collective's number
        except Exception:  # noqa: BLE001
            pass
    if not works:
        _finish(token, event, start, issued, "done", None, seq, lane)
        return
    remaining = [len(works)]
    lock = threading.Lock()

    def one_done(*_: Any) -> None:
        try:
            with lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                _finish(token, event, start, issued, "done", None, seq, lane)
        except Exception:  # noqa: BLE001 - a completion callback must never raise into torch
            pass

    for work in works:
        try:
            future = work.get_future()
        except Exception:  # noqa: BLE001 - gloo's point-to-point Works have no future: their wait() says
            future = None
        if future is not None:
            future.then(one_done)
        else:
            _complete_on_wait(work, one_done)


def _complete_on_wait(work: Any, done: Callable[[], None]) -> None:
    cls = type(work)
    with _lock:
        if cls not in _wait_patched:
            _patch_wait(cls)
    try:
        ref: Any = weakref.ref(work)
    except TypeError:
        ref = lambda work=work: work  # noqa: E731 - kept alive until waited on
    _waiting[id(work)] = (ref, done)


def _patch_wait(cls: type) -> None:
    own = cls.__dict__.get("wait")
    inherited = cls.wait  # type: ignore[attr-defined]

    @functools.wraps(inherited)
    def wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = inherited(self, *args, **kwargs)
        entry = _waiting.get(id(self))
        if entry is not None and entry[0]() is self:
            del _waiting[id(self)]
            entry[1]()
        return result

    cls.wait = wait  # type: ignore[attr-defined]
    _wait_patched.add(cls)

    def undo() -> None:
        if own is not None:
            cls.wait = own  # type: ignore[attr-defined]
        else:
            delattr(cls, "wait")
        _wait_patched.discard(cls)
        _waiting.clear()

    _undo.insert(0, undo)


# -- DDP buckets ----------------------------------------------------------------------------------


def _parameter_name(name: str) -> str:
    return name.replace("_orig_mod.", "")  # DDP(torch.compile(model)): the model's own names


class BucketHook:
    """dynascope's comm hook on one DDP reducer: the program's hook if it registered one, else what DDP
    does without a hook; while tracing, with the bucket's details on the collectives it issues."""

    def __init__(self, ddp: Any) -> None:
        self.target: tuple[Callable, Any] | None = None  # the program's (hook, state)
        self.module = weakref.ref(ddp.module)
        self.names: dict[int, tuple[int, str]] | None = None  # id(param) -> (position, name)
        self.scale_in_place = bool(getattr(ddp, "gradient_as_bucket_view", False))
        self.ddp = weakref.ref(ddp)

    def __call__(self, state: Any, bucket: Any) -> Any:
        target = self.target
        if not _recording() or _is_compiling():
            return target[0](target[1], bucket) if target is not None else self.default(state, bucket)
        before = _tls.bucket
        try:
            _tls.bucket = self.details(bucket)
        except Exception:  # noqa: BLE001 - the bucket still reduces, without its details
            _tls.bucket = None
        try:
            return target[0](target[1], bucket) if target is not None else self.default(state, bucket)
        finally:
            _tls.bucket = before

    def default(self, group: Any, bucket: Any) -> Any:
        """What DDP's reducer does with no hook: grads scaled by 1/world size (multiplied while copied into
        the bucket; divided where they are the bucket's views already), the bucket all-reduced (sum)."""
        import torch.distributed as dist

        buffer = bucket.buffer()
        size = group.size()
        ddp = self.ddp()
        if ddp is not None and getattr(ddp, "_join_config", None) is not None and ddp._join_config.enable \
                and not getattr(ddp, "_divide_by_initial_world_size", True) and "join" not in _warned:  # fmt: skip
            _warned.add("join")
            print("dynascope: DDP under Join(divide_by_initial_world_size=False): dynascope's bucket hook divides "
                  "by the whole world size; trace without collective events (DYNASCOPE_STEP_EVENTS=0) to keep "
                  "DDP's own division", file=sys.stderr)  # fmt: skip
        if self.scale_in_place:
            buffer.div_(size)
        else:
            buffer.mul_(1.0 / size)
        return dist.all_reduce(buffer, group=group, async_op=True).get_future().then(_first_value)

    def details(self, bucket: Any) -> dict:
        params = bucket.parameters()
        names = self.names
        if names is None:
            module = self.module()
            named = module.named_parameters() if module is not None else ()
            names = self.names = {id(p): (i, _parameter_name(n)) for i, (n, p) in enumerate(named)}
        known = sorted(names[id(p)] for p in params if id(p) in names)
        layers = f"{known[0][1]}..{known[-1][1]}" if known else ""
        return {"bucket": int(bucket.index()), "params": len(params), "layers": layers}


def _first_value(future: Any) -> Any:
    return future.value()[0]


def _builtin_hook(kind: Any) -> Callable:
    """The Python comm hook that does what a built-in one does (the same ops, in the same order)."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    if kind == dist.BuiltinCommHookType.FP16_COMPRESS:
        return default_hooks.fp16_compress_hook
    return default_hooks.allreduce_hook


def _attach(ddp: Any) -> BucketHook | None:
    """Give `ddp` dynascope's comm hook (once), where its reducer is in use."""
    hook = ddp.__dict__.get("_dynascope_bucket_hook")
    if hook is not None or not _recording() or not _torch.ddp_reducer_in_use(ddp):
        return hook
    hook = BucketHook(ddp)
    _torch.ddp_register_comm_hook(ddp.reducer, ddp.process_group, hook)
    ddp.__dict__["_dynascope_bucket_hook"] = hook
    return hook


def _install_ddp() -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    def replace(name: str, make: Callable[[Callable], Callable]) -> None:
        original = DDP.__dict__[name]
        setattr(DDP, name, make(original))
        _undo.append(functools.partial(setattr, DDP, name, original))

    def traced_init(original: Callable) -> Callable:
        @functools.wraps(original)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            original(self, *args, **kwargs)
            if not _is_compiling():
                try:
                    _attach(self)
                except Exception as exc:  # noqa: BLE001 - DDP trains as usual, without bucket events
                    _say_once("attach", f"no DDP bucket events ({type(exc).__name__}: {exc})")

        return __init__

    def registration(original: Callable) -> Callable:
        @functools.wraps(original)
        def register(self: Any, *args: Any, **kwargs: Any) -> Any:
            hook = self.__dict__.get("_dynascope_bucket_hook")
            if hook is None:
                try:
                    hook = _attach(self)
                except Exception:  # noqa: BLE001 - the program's hook, registered as usual
                    hook = None
            if hook is None:
                return original(self, *args, **kwargs)

            def route(kind: str, reducer: Any, *what: Any) -> None:
                if hook.target is not None:  # the reducer's own words
                    raise RuntimeError("register_comm_hook or register_builtin_comm_hook can only be called once.")
                if kind == "python":
                    state, user_hook = what
                    hook.target = (user_hook, state)
                else:
                    hook.target = (_builtin_hook(what[0]), self.process_group)

            with _torch.ddp_comm_hook_registration(route):
                return original(self, *args, **kwargs)

        return register

    replace("__init__", traced_init)
    replace("register_comm_hook", registration)
    replace("_register_builtin_comm_hook", registration)


def _say_once(key: str, text: str) -> None:
    if key not in _warned:
        _warned.add(key)
        print(f"dynascope: {text}", file=sys.stderr)
