"""Frame events: where each piece of code Dynamo generated starts and returns, and each call of a
compiled function, so that the eager time between graph calls can be charged to the graph break that
causes it (analyze/breaks.py).

A frame Dynamo compiles runs its transformed code: guards passed, it calls the frame's compiled graph
(if any), and where tracing stopped at a graph break it runs the breaking instruction eagerly and calls
a resume function, itself a frame Dynamo compiles, with graphs and breaks of its own. Graph calls are
already events; what bounds the eager time around them is when each frame starts and returns. So:

- every frame Dynamo compiles while a session records, whose graphs dynascope traces, gets a probe at
  its start and one before each return (trace/probes.py: two C calls, about 0.15 µs, no Python frame,
  written as an instant `dynamo.frame` event). Its static facts go into the events' `OH` record once:
  compile id, function, file and line, whether it is a resume function, and, where tracing stopped at
  a graph break, the break: the line in this frame where it split, torch's reason and the user line
  that caused it (innermost);
- every function or module compiled with `torch.compile` while a session records gets a wrapper that
  probes each call's start and end (`dynamo.call` events), so that a call whose function Dynamo ran
  eagerly (it gave up on it) is timed too, and calls can be counted.

The explanation's view of a cache entry keeps Dynamo's own code: trace/probes.py remembers it.
"""

from __future__ import annotations

import functools
import inspect
import linecache
import re
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

from dynascope import _torch
from dynascope.errors import TorchVersionError
from dynascope.trace import buffers, probes
from dynascope.trace.ops import TABLE, OpSpec
from dynascope.trace.probes import CALL_CAT, FRAME_CAT
from dynascope.userframes import first_user_frame

RESUME_PREFIX = "torch_dynamo_resume_in_"
_RESUME_GLOBAL = "__resume_at_"
_GRAPH_GLOBAL = "__compiled_fn"
_UUID_SUFFIX = re.compile(r"(_[0-9a-f]{8}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{12})$")

_lock = threading.Lock()
_remove_hook: Callable[[], None] | None = None
_original_compile: Any = None
_break_mark = 0  # torch's graph-break list up to here belongs to compiles already seen
_traced: set[str] = set()  # Dynamo graphs ("__compiled_fn_3") whose forward or inference graph is traced
_untraced: set[str] = set()  # ... and those that run untraced (capture/untraced.py)
_noted: set[str] = set()


def installed() -> bool:
    return _remove_hook is not None


def install() -> None:
    """Probe the frames Dynamo compiles from now on, and the functions torch.compile wraps."""
    global _remove_hook, _original_compile, _break_mark
    with _lock:
        if _remove_hook is not None:
            return
        try:
            _remove_hook = _torch.register_replacing_bytecode_hook(_on_frame)
            _break_mark = _torch.graph_break_count()
        except TorchVersionError as exc:
            _note(str(exc))
            return
        import torch

        _original_compile = torch.compile
        torch.compile = _compile_wrapper(_original_compile)


def uninstall() -> None:
    """Frames compiled from now on run as Dynamo generated them; torch.compile is torch's again.
    Code already probed keeps its probes (they record nothing while no session records)."""
    global _remove_hook, _original_compile
    with _lock:
        if _remove_hook is None:
            return
        _remove_hook()
        _remove_hook = None
        import torch

        if getattr(torch.compile, "__wrapped__", None) is _original_compile:
            torch.compile = _original_compile  # type: ignore[assignment]
        _original_compile = None


def graph_traced(graph: str) -> None:
    """The backend traces Dynamo graph `graph` ("__compiled_fn_3"): its frame may be probed."""
    _traced.add(graph)


def graph_untraced(graph: str) -> None:
    """Graph `graph` runs untraced: its frame's eager time cannot be told from its graph time."""
    _untraced.add(graph)


def _note(text: str) -> None:
    if text not in _noted:
        _noted.add(text)
        print(f"dynascope: note: {text}; graph breaks are not costed", file=sys.stderr)


# ------------------------------------------------------------------------------------------------
# frames


def _on_frame(code: types.CodeType, new_code: types.CodeType) -> types.CodeType | None:
    """Dynamo's bytecode hook: `new_code` with probes, or None to keep it (never raises into torch)."""
    try:
        return _probed(code, new_code)
    except Exception as exc:  # noqa: BLE001 - the frame runs Dynamo's own code, unprobed
        _note(f"a frame of {code.co_name} could not be probed ({type(exc).__name__}: {exc})")
        return None


def _probed(code: types.CodeType, new_code: types.CodeType) -> types.CodeType | None:
    breaks = _breaks_since_last_frame()
    if not buffers.recording():
        return None
    names = new_code.co_names
    graphs = {_UUID_SUFFIX.sub("", n) for n in names if n.startswith(_GRAPH_GLOBAL)}
    if any(g not in _traced or g in _untraced for g in graphs):
        return None  # a graph compiled by another backend, or untraced: its time is not in the trace
    splits = any(n.startswith(_RESUME_GLOBAL) for n in names)  # it calls a resume function: a graph break
    attrs = frame_facts(code, _torch.current_compile_id() or "?", len(graphs), breaks if splits else None)
    label = f"{code.co_name} [{attrs['compile_id']}]"
    enter = TABLE.register_graph(OpSpec.make(label, FRAME_CAT, False, {**attrs, "probe": "enter"}), [])
    # A resume function returns straight into the frame that called it, which returns at once (its code
    # is `return __resume_at_...(...)`): that frame's return probe ends both, so one probe a break hit.
    leave = None if attrs["resume"] else TABLE.register_graph(
        OpSpec.make(label, FRAME_CAT, False, {**attrs, "probe": "exit"}), [])
    probed = _torch.add_probes(new_code, probes.TARGET, probes.CLOCK, -enter, None if leave is None else -leave)
    probes.remember(probed, new_code)
    return probed


def _breaks_since_last_frame() -> list[tuple[str, list[tuple[str, int, str]]]]:
    """The graph breaks torch listed since the previous frame was generated (compiles of one thread do
    not interleave): the last of them is the one that split this frame, if it split."""
    global _break_mark
    try:
        count = _torch.graph_break_count()
        if count < _break_mark:  # torch._dynamo.reset() emptied the list
            _break_mark = 0
        found = _torch.graph_breaks_since(_break_mark)
        _break_mark = count
    except TorchVersionError:
        return []
    return found


def frame_facts(code: types.CodeType, compile_id: str, graphs: int,
                breaks: list[tuple[str, list[tuple[str, int, str]]]] | None) -> dict[str, Any]:
    """The static facts of one generated frame (its events' OH record; docs/trace-format.md); `breaks`:
    the graph breaks torch listed while compiling it, None where it did not split."""
    resume = code.co_name.startswith(RESUME_PREFIX)
    function = re.sub(r"^torch_dynamo_resume_in_(.+)_at_\d+$", r"\1", code.co_name) if resume else code.co_name
    facts: dict[str, Any] = {
        "kind": "frame", "compile_id": compile_id, "function": function,
        "qualname": getattr(code, "co_qualname", code.co_name), "file": code.co_filename,
        "line": code.co_firstlineno, "resume": int(resume), "graphs": graphs, "breaks": 0,
    }  # fmt: skip
    if breaks is not None:
        facts["breaks"] = 1
        facts.update(_split_of(code, breaks))
    return facts


def _split_of(code: types.CodeType, breaks: list[tuple[str, list[tuple[str, int, str]]]]) -> dict[str, Any]:
    """Where and why the frame of `code` split: the last break listed whose user stack starts in its
    file (the outermost entry is the line in this frame, the innermost the line that caused it). The break
    is charged to the first user frame (userframes.py), a library's line it led to kept as `break_library`."""
    for reason, stack in reversed(breaks):
        if not stack or stack[0][0] != code.co_filename:
            continue
        user = first_user_frame([f for f, _, _ in stack])
        file, line, _ = stack[-1] if user is None else stack[user]
        facts = {"break_line": stack[0][1], "reason": _torch.break_reason_name(reason), "break_file": file,
                 "break_at": line, "break_code": linecache.getline(file or "", line or 0).strip() or None}  # fmt: skip
        if user is not None and user != len(stack) - 1:
            facts["break_library"] = f"{stack[-1][0]}:{stack[-1][1]}"
        return facts
    return {}


# ------------------------------------------------------------------------------------------------
# calls of compiled functions


def _compile_wrapper(original: Callable) -> Callable:
    @functools.wraps(original)
    def compile(model: Any = None, *args: Any, **kwargs: Any) -> Any:
        if model is None:  # @torch.compile(...): the decorator, then the function
            return lambda target: compile(target, *args, **kwargs)
        compiled = original(model, *args, **kwargs)
        if not buffers.recording():
            return compiled
        try:
            return timed_calls(compiled, model)
        except Exception as exc:  # noqa: BLE001 - the compiled function works untimed
            _note(f"calls of {type(model).__name__} cannot be timed ({type(exc).__name__}: {exc})")
            return compiled

    return compile


def timed_calls(compiled: Any, model: Any) -> Any:
    """`compiled` (what torch.compile returned for `model`) with each call's start and end probed."""
    code = _user_code(model)
    if code is None:
        return compiled
    label: str = getattr(code, "co_qualname", code.co_name)
    attrs = {"kind": "call", "function": code.co_name, "qualname": label, "file": code.co_filename,
             "line": code.co_firstlineno}  # fmt: skip
    entry = _torch.entry_frame_code(compiled)  # torch.nn's own modules: a wrapper frame is compiled first
    if entry is None:
        entry = _decorator_code(model, code)  # a decorated forward: the decorator's wrapper is compiled first
    if entry is not None:
        attrs.update(entry_function=entry.co_name, entry_file=entry.co_filename, entry_line=entry.co_firstlineno)
    enter = TABLE.register_graph(OpSpec.make(label, CALL_CAT, False, {**attrs, "probe": "enter"}), [])
    leave = TABLE.register_graph(OpSpec.make(label, CALL_CAT, False, {**attrs, "probe": "exit"}), [])
    if _torch.is_optimized_module(compiled):
        compiled.forward = _timed(compiled.forward, -enter, -leave)
        return compiled
    return _timed(compiled, -enter, -leave)


def _timed(fn: Callable, enter: int, leave: int) -> Callable:
    import torch

    target, clock, is_compiling = probes.TARGET, probes.CLOCK, torch.compiler.is_compiling

    @functools.wraps(fn)
    def compiled_call(*args: Any, **kwargs: Any) -> Any:
        if is_compiling():  # Dynamo traces through it: the function, as torch.compile gave it
            return fn(*args, **kwargs)
        target.extend((enter, clock()))
        try:
            return fn(*args, **kwargs)
        finally:
            target.extend((leave, clock()))

    _torch.skip_frames_of(compiled_call)  # Dynamo compiles what it calls, never this wrapper itself
    return compiled_call


def _user_code(model: Any) -> types.CodeType | None:
    """The code object whose frame Dynamo compiles first when `model` is called: a module's `forward`,
    else the function (a bound `Module._call_impl`, as Module.compile() passes it, stands for forward)."""
    import torch

    owner: Any = None
    if isinstance(model, torch.nn.Module):
        owner = type(model)
    elif inspect.ismethod(model) and getattr(model, "__func__", None) is torch.nn.Module._call_impl:
        owner = type(model.__self__)
    if owner is not None:
        model = owner.forward
    fn = inspect.unwrap(getattr(model, "__func__", model))
    return getattr(fn, "__code__", None)


def _decorator_code(model: Any, code: types.CodeType) -> types.CodeType | None:
    """The code of the outermost wrapper around the function `code` is of, where a decorator wraps it
    (functools.wraps: transformers' `can_return_tuple` and the like): the frame Dynamo compiles first.
    None where the function is not wrapped."""
    import torch

    fn: Any = model
    if isinstance(model, torch.nn.Module):
        fn = type(model).forward
    elif inspect.ismethod(model) and getattr(model, "__func__", None) is torch.nn.Module._call_impl:
        fn = getattr(type(model.__self__), "forward", None)
    outer = getattr(getattr(fn, "__func__", fn), "__code__", None)
    return outer if isinstance(outer, types.CodeType) and outer is not code else None
