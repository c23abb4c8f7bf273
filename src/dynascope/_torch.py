"""The only module that touches torch's private APIs.

Each accessor names the private piece it reads and the torch versions it was checked on. When a piece
moved, the accessor raises TorchVersionError naming it and the installed torch version, so callers
can report that one line and carry on with the rest of their work.

Public torch APIs (torch.compile, torch.fx.GraphModule, ...) are used directly elsewhere; anything
with a leading underscore, or documented as internal, goes through here.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import importlib
import inspect
import re
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

from dynascope.errors import ConfigError, TorchVersionError

MIN_TORCH = (2, 5, 1)
CHECKED_ON = "2.5.1, 2.13.0 and 2.15.0"  # every accessor below was exercised against these releases


def _parse_version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("+", maxsplit=1)[0].split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def require_torch() -> Any:
    """Import torch, or raise one clear line saying how to install a usable version."""
    try:
        torch = importlib.import_module("torch")
    except ImportError as exc:
        raise TorchVersionError(
            "dynascope needs PyTorch >= 2.5.1, and torch is not installed: "
            "pip install torch==2.13.0 (the CPU build) or a newer release"
        ) from exc
    if _parse_version(torch.__version__) < MIN_TORCH:
        raise TorchVersionError(
            f"dynascope needs PyTorch >= 2.5.1, found {torch.__version__}: upgrade with pip install -U 'torch>=2.5.1'"
        )
    return torch


def torch_version() -> str:
    return require_torch().__version__


def torch_at_least(*version: int) -> bool:
    """Whether the installed torch is this release or newer: torch_at_least(2, 6)."""
    return _parse_version(torch_version()) >= version


def moved(piece: str, exc: BaseException | None = None) -> TorchVersionError:
    """The error for a private torch piece that is not where dynascope expects it."""
    detail = f" ({type(exc).__name__}: {exc})" if exc else ""
    return TorchVersionError(
        f"torch {torch_version()} has no {piece}{detail}; dynascope was checked on torch {CHECKED_ON}. "
        "That part is skipped; please report this torch version."
    )


def unsupported(feature: str, has_it: str = "2.13.0") -> TorchVersionError:
    """The one line for a feature the installed torch cannot give at all (not moved: never there)."""
    return TorchVersionError(
        f"{feature}: not available on torch {torch_version()} (torch {has_it} has them); everything else works"
    )


# ---------------------------------------------------------------------------------------------
# Capture side (compile ids, AOT autograd, FX codegen). Checked on 2.5.1, 2.13.0 and 2.15.0.
# ---------------------------------------------------------------------------------------------


def current_compile_id() -> str | None:
    """The compile id Dynamo is working on now, printed as Dynamo prints it ("0/0"), or None.

    Private: torch._guards.CompileContext.current_compile_id (2.5.1 .. 2.15).
    """
    try:
        from torch._guards import CompileContext
    except ImportError as exc:
        raise moved("torch._guards.CompileContext", exc) from exc
    cid = CompileContext.current_compile_id()
    return None if cid is None else str(cid)


def graph_name(gm: Any) -> str | None:
    """The name Dynamo installs a compiled graph under ("__compiled_fn_3", maybe with a uuid suffix).

    gm.meta["backend_id"] / gm._backend_id (2.13 .. 2.15). Torch 2.5.1 does not hand it to the
    backend; there it is the local `name` of OutputGraph.compile_and_call_fx_graph, which is on the
    stack while the backend compiles. None when neither is found.
    """
    meta = getattr(gm, "meta", None)
    name = (meta.get("backend_id") if isinstance(meta, dict) else None) or getattr(gm, "_backend_id", None)
    if name:
        return str(name)
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "compile_and_call_fx_graph" and "output_graph" in frame.f_code.co_filename:
            found = frame.f_locals.get("name")
            return found if isinstance(found, str) and found.startswith("__compiled_fn") else None
        frame = frame.f_back
    return None


def aot_autograd(**kwargs: Any) -> Any:
    """torch._dynamo.backends.common.aot_autograd (2.5.1 .. 2.15)."""
    try:
        from torch._dynamo.backends.common import aot_autograd as _aot
    except ImportError as exc:
        raise moved("torch._dynamo.backends.common.aot_autograd", exc) from exc
    return _aot(**kwargs)


def min_cut_partitioner() -> Any:
    """The partitioner backend "aot_eager" uses: torch._functorch.partitioners (2.5.1 .. 2.15)."""
    try:
        from torch._functorch.partitioners import min_cut_rematerialization_partition
    except ImportError as exc:
        raise moved("torch._functorch.partitioners.min_cut_rematerialization_partition", exc) from exc
    return min_cut_rematerialization_partition


def boxed_codegen() -> Any:
    """A codegen for the boxed calling convention AOT compilers use: the generated forward takes one
    list, unpacks it and clears it, so each input can be freed as soon as the graph is done with it.

    torch.fx.graph._BoxedCodeGen where torch has it (2.13 .. 2.15); torch 2.5.1 has none (its
    "aot_eager" runs an fx.Interpreter instead), so there the same convention is generated by a
    subclass of the public torch.fx.CodeGen.
    """
    fx_graph = importlib.import_module("torch.fx.graph")
    boxed = getattr(fx_graph, "_BoxedCodeGen", None)
    if boxed is not None:
        return boxed()
    base = getattr(fx_graph, "CodeGen", None)
    if base is None:
        raise moved("torch.fx.graph.CodeGen (and _BoxedCodeGen)")
    return _boxed_codegen_type(base)()


@functools.cache
def _boxed_codegen_type(base: type) -> type:
    class BoxedCodeGen(base):
        def gen_fn_def(self, free_vars: list[str], maybe_return_annotation: str, **_: Any) -> str:
            names = [v.split(":")[0].split("=")[0].strip() for v in free_vars if v != "self"]
            lines = [f"def {self._func_name}(self, args_list){maybe_return_annotation}:"]
            if names:
                lines.append("    args_iter = iter(args_list)")
                lines.extend(f"    {name} = next(args_iter)" for name in names)
                lines.append("    args_list.clear()")
            return "\n".join(lines)

    return BoxedCodeGen


def lookup_backend(name: str) -> Any:
    """Resolve a backend name ("eager", "aot_eager", "inductor") to its compiler function."""
    try:
        from torch._dynamo.backends.registry import lookup_backend as _lookup
    except ImportError as exc:
        raise moved("torch._dynamo.backends.registry.lookup_backend", exc) from exc
    return _lookup(name)


def inductor_mode_options(mode: str) -> dict[str, Any]:
    """The inductor config a torch.compile mode sets ("reduce-overhead" -> cudagraphs, ...):
    torch._inductor.list_mode_options (2.5.1 .. 2.15). An unknown mode raises ConfigError listing them."""
    try:
        from torch._inductor import list_mode_options
    except ImportError as exc:
        raise moved("torch._inductor.list_mode_options", exc) from exc
    modes = list_mode_options()
    if mode not in modes:
        raise ConfigError(f"torch.compile mode {mode!r} is not one of {', '.join(modes)}")
    return dict(modes[mode])


def add_structured_trace_handler(callback: Any) -> Any:
    """Receive torch's structured compile log (what TORCH_TRACE/tlparse see) in-process, no file needed.

    `callback(record: dict, payload: str | None)` is called for every record; `record` is torch's
    metadata dict (its first key names the record: "dynamo_start", "chromium_event",
    "compilation_metrics", ...; plus frame_id / frame_compile_id / attempt). Returns a function that
    removes the handler. Several handlers may be installed at once (the logger fans out).

    Private: the "torch.__trace" logger that torch._logging.trace_structured writes to, which emits
    only while it has a handler (2.5.1 .. 2.15).
    """
    import logging

    require_torch()
    logger = logging.getLogger("torch.__trace")

    class _Handler(logging.Handler):
        def emit(self, rec: logging.LogRecord) -> None:
            metadata = getattr(rec, "metadata", None)
            if isinstance(metadata, dict):
                try:
                    callback(metadata, getattr(rec, "payload", None))
                except Exception:  # noqa: BLE001 - an observer must never break the user's compile
                    pass

    handler = _Handler(level=logging.DEBUG)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False  # as TORCH_TRACE sets it: these records are not for the user's log

    def remove() -> None:
        logger.removeHandler(handler)

    return remove


def record_compile_id(record: dict[str, Any]) -> str | None:
    """The compile id ("0/1") a structured-trace record was logged under, from the frame_id and
    frame_compile_id torch adds to every record logged inside a compile (2.5.1 .. 2.15). Torch 2.5.1's
    chromium events carry no compile_id in their args, so this is how their compile is known."""
    frame, count = record.get("frame_id"), record.get("frame_compile_id")
    if frame is None or count is None:
        return None
    return f"{frame}/{count}"


# ---------------------------------------------------------------------------------------------
# Explain side (cache entries, guards, hooks). Owned by the explain package; add accessors below.
# ---------------------------------------------------------------------------------------------


def _explain_import(module: str, name: str, piece: str) -> Any:
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise moved(piece, exc) from exc


def cache_entries(code: Any) -> list[Any]:
    """The cache entries of a code object, in the order Dynamo checks them (most recently used first).

    Private: torch._dynamo.eval_frame._debug_get_cache_entry_list (2.5.1 .. 2.15). Each entry
    (torch._C._dynamo.eval_frame._CacheEntry) has .code, .compile_id, .guard_manager, .backend; on
    2.5.1 .check_fn for .guard_manager, and no .backend.
    """
    fn = _explain_import(
        "torch._dynamo.eval_frame", "_debug_get_cache_entry_list",
        "torch._dynamo.eval_frame._debug_get_cache_entry_list",
    )
    try:
        return list(fn(code))
    except TypeError as exc:
        raise moved("torch._dynamo.eval_frame._debug_get_cache_entry_list(code)", exc) from exc


def entry_compile_id(entry: Any) -> str:
    """The compile id of a cache entry as Dynamo prints it. _CacheEntry.compile_id (2.5.1 .. 2.15)."""
    try:
        return str(entry.compile_id)
    except AttributeError as exc:
        raise moved("_CacheEntry.compile_id", exc) from exc


def entry_backend_name(entry: Any) -> str | None:
    """The backend name of a cache entry: _CacheEntry.backend (a torch._TorchCompileWrapper with
    .compiler_name, or the raw compiler function) (2.10 .. 2.15). Cache entries before 2.10 do not
    record their backend (checked on 2.5.1, 2.8.0, 2.9.1)."""
    if not hasattr(entry, "backend"):
        raise unsupported("cache entries' backend names")
    backend = entry.backend
    if backend is None:
        return None
    name = getattr(backend, "compiler_name", None)
    if isinstance(name, str):
        return name
    inner = getattr(backend, "compiler_fn", backend)
    return getattr(inner, "__name__", None) or type(inner).__name__


def unwrap_compiled(obj: Any) -> Any:
    """Undo torch.compile's wrapping: an OptimizedModule gives its original module (._orig_mod), a
    compiled function gives the user function (._torchdynamo_orig_callable). Returns obj unchanged
    when it is not wrapped. Private attributes of torch._dynamo.eval_frame (2.5.1 .. 2.15)."""
    for _ in range(8):
        if hasattr(obj, "_orig_mod") and type(obj).__name__ == "OptimizedModule":
            obj = obj._orig_mod
            continue
        inner = getattr(obj, "_torchdynamo_orig_callable", None)
        if inner is not None and inner is not obj:
            obj = inner
            continue
        break
    return obj


def graph_module_of(compiled_fn: Any) -> Any:
    """The FX GraphModule behind a `__compiled_fn_N` global, or None when the backend replaced it
    (aot_eager, inductor). Private: the `_torchdynamo_orig_callable` attribute eval_frame sets on the
    disabled wrapper; with backend "eager" it is the bound GraphModule.forward (2.5.1 .. 2.15)."""
    fx = importlib.import_module("torch.fx")
    target = getattr(compiled_fn, "_torchdynamo_orig_callable", compiled_fn)
    seen = 0
    while target is not None and seen < 6:
        seen += 1
        if isinstance(target, fx.GraphModule):
            return target
        owner = getattr(target, "__self__", None)
        if isinstance(owner, fx.GraphModule):
            return owner
        target = getattr(target, "__wrapped__", None)
    return None


def _guard_manager(entry: Any) -> Any:
    """A cache entry's GuardManagerWrapper: _CacheEntry.guard_manager (2.13 .. 2.15), named
    _CacheEntry.check_fn on 2.5.1 (the same wrapper, with .root, .code_parts and .check_verbose)."""
    for name in ("guard_manager", "check_fn"):
        manager = getattr(entry, name, None)
        if manager is not None:
            return manager
    raise moved("_CacheEntry.guard_manager (or .check_fn)")


def guard_tree(entry: Any) -> list[dict[str, Any]]:
    """Walk a cache entry's C++ guard tree. Returns one dict per guard manager that has leaf guards, in
    the tree's order: {"source": "L['a']" | None (root), "depth": int, "guards": [{"kind", "parts",
    "fail_count"}]}; "parts" are the leaf's verbose code parts, each "check  # user line  # file:line in fn".

    Private: GuardManagerWrapper.root (RootGuardManager), GuardManager.get_leaf_guards /
    get_child_managers / get_source / fail_count, DictGuardManager.get_key_value_managers,
    LeafGuard.verbose_code_parts,
    RootGuardManager.get_epilogue_lambda_guards (2.5.1 .. 2.15).
    """
    try:
        root = _guard_manager(entry).root
    except AttributeError as exc:
        raise moved("_CacheEntry.guard_manager.root (C++ guard tree)", exc) from exc
    out: list[dict[str, Any]] = []

    def leaves(mgr: Any, extra: list[Any]) -> list[dict[str, Any]]:
        rows = []
        for leaf in list(mgr.get_leaf_guards()) + extra:
            try:
                parts = list(leaf.verbose_code_parts())
            except Exception:  # noqa: BLE001 - one odd leaf must not lose the rest
                parts = []
            rows.append({"kind": type(leaf).__name__, "parts": parts, "fail_count": None})
        return rows

    def walk(mgr: Any, depth: int) -> None:
        try:
            source = None if depth == 0 else mgr.get_source()
        except Exception:  # noqa: BLE001
            source = None
        extra = []
        if depth == 0 and hasattr(mgr, "get_epilogue_lambda_guards"):
            extra = list(mgr.get_epilogue_lambda_guards())
        rows = leaves(mgr, extra)
        if rows:
            try:
                fails = int(mgr.fail_count())
            except Exception:  # noqa: BLE001
                fails = None
            for row in rows:
                row["fail_count"] = fails
            out.append({"source": source, "depth": depth, "guards": rows})
        # DictGuardManager keeps its entries apart from the general children (2.5.1 .. 2.15)
        if hasattr(mgr, "get_key_value_managers"):
            for _idx, (key_mgr, val_mgr) in sorted(mgr.get_key_value_managers().items()):
                for sub in (key_mgr, val_mgr):
                    if sub is not None:
                        walk(sub, depth + 1)
        for child in mgr.get_child_managers():
            walk(child, depth + 1)

    try:
        walk(root, 0)
    except AttributeError as exc:
        raise moved("GuardManager.get_leaf_guards/get_child_managers", exc) from exc
    return out


def check_guard_user_lines() -> None:
    """Raise the one-line note where guards do not say which user line installed them. Dynamo ends a
    guard's verbose code part with "# <user line>  # file:line in fn" from 2.9 (checked on 2.9.1 .. 2.15);
    before (checked on 2.5.1 and 2.8.0) it adds it to few guards and to no input's tensor guards."""
    if not torch_at_least(2, 9):
        raise unsupported("the user lines that installed guards")


def guard_code_parts(entry: Any) -> list[str]:
    """Flat guard text of a cache entry: GuardManagerWrapper.code_parts (2.5.1 .. 2.15). Fallback when the
    tree walk is unavailable."""
    try:
        return list(_guard_manager(entry).code_parts)
    except AttributeError as exc:
        raise moved("GuardManagerWrapper.code_parts", exc) from exc


def check_entry_guards(entry: Any, f_locals: dict[str, Any]) -> tuple[bool, list[str]]:
    """Evaluate a cache entry's guards on a dict of frame locals without running anything.
    Returns (passed, failing check descriptions). Private: GuardManagerWrapper.check_verbose ->
    GuardDebugInfo(result, verbose_code_parts) (2.5.1 .. 2.15)."""
    try:
        info = _guard_manager(entry).check_verbose(f_locals)
    except AttributeError as exc:
        raise moved("GuardManagerWrapper.check_verbose", exc) from exc
    return bool(info.result), [str(p) for p in getattr(info, "verbose_code_parts", [])]


def guard_fail_reason(entry: Any, f_locals: dict[str, Any]) -> str | None:
    """torch's own readable reason a cache entry misses these locals ("0/0: tensor 'a' dtype mismatch.
    expected Float, actual Double"), or None if it would hit, without recording a guard failure.
    Private: torch._dynamo.guards.get_guard_fail_reason(..., skip_logging=True) (2.9 .. 2.15, with the
    backend from 2.10); before, where get_guard_fail_reason always records (checked on 2.5.1 and 2.8),
    get_guard_fail_reason_helper(manager, locals, id)."""
    guards = importlib.import_module("torch._dynamo.guards")
    manager = _guard_manager(entry)
    helper = getattr(guards, "get_guard_fail_reason_helper", None)
    fn = getattr(guards, "get_guard_fail_reason", None)
    try:
        params = inspect.signature(fn).parameters if fn is not None else {}
        if fn is not None and "skip_logging" in params:
            # 2.10+ take the entry's backend, 2.9 does not
            backend = {"backend": getattr(entry, "backend", None)} if "backend" in params else {}
            text = fn(manager, entry.code, f_locals, entry.compile_id, skip_logging=True, **backend)
        elif helper is not None:
            text = helper(manager, f_locals, entry.compile_id)
        else:
            raise moved("torch._dynamo.guards.get_guard_fail_reason(skip_logging=...)")
    except TypeError as exc:
        raise moved("torch._dynamo.guards.get_guard_fail_reason(skip_logging=...)", exc) from exc
    return text or None


def register_bytecode_hook(hook: Any) -> Any:
    """Call hook(old_code, new_code) for every frame Dynamo compiles (resume functions included); the
    hook must return None. Returns a function that removes it. Private:
    torch._dynamo.convert_frame.register_bytecode_hook -> RemovableHandle (2.5.1 .. 2.15)."""
    reg = _explain_import("torch._dynamo.convert_frame", "register_bytecode_hook",
                          "torch._dynamo.convert_frame.register_bytecode_hook")
    handle = reg(hook)
    return handle.remove


def logs_graph_breaks() -> bool:
    """Whether Dynamo logs each graph break as a "dynamo_graph_break_reason" structured-trace
    artifact: yes on 2.13 .. 2.15, no on 2.5.x (checked on 2.5.1; there graph_breaks_since() is the
    source). Checked on 2.8.0 .. 2.12.1 too."""
    return torch_at_least(2, 6)


def graph_break_count() -> int:
    """How many graph breaks Dynamo has recorded in this process (see graph_breaks_since)."""
    reasons = _explain_import("torch._dynamo.utils", "graph_break_reasons", "torch._dynamo.utils.graph_break_reasons")
    return len(reasons)


def graph_breaks_since(start: int) -> list[tuple[str, list[tuple[str, int, str]]]]:
    """Graph breaks recorded after the first `start`: (torch's reason text, user stack as
    (file, line, function), innermost last). Private: torch._dynamo.utils.graph_break_reasons, a list of
    GraphCompileReason(reason, user_stack, graph_break) (2.5.1 .. 2.15)."""
    reasons = _explain_import("torch._dynamo.utils", "graph_break_reasons", "torch._dynamo.utils.graph_break_reasons")
    out = []
    for item in list(reasons)[start:]:
        if getattr(item, "graph_break", True):
            frames = getattr(item, "user_stack", [])
            stack = [(str(f.filename), int(f.lineno or 0), _frame_name(f.name)) for f in frames]
            out.append((str(getattr(item, "reason", item)), stack))
    return out


def _frame_name(name: Any) -> str:
    """A user-stack frame's function name; DDPOptimizer's frames on 2.5.1 carry the class itself there."""
    return name if isinstance(name, str) else str(getattr(name, "__name__", name))


# torch 2.5.1 names graph breaks by its internal reason; later torch names the same breaks so
_OLD_BREAK_NAMES = (("generic_jump", "Data-dependent branching"), ("builtin: ", "Failed to trace builtin operator"))


def break_reason_name(reason: str) -> str:
    """A graph break's reason from graph_breaks_since() in the words torch 2.6+ uses for it: the first line
    (the rest is explanation and hints), torch 2.5.1's internal names translated, an object's address
    left out (`<function helper at 0x7f..>` is `helper`: the same break reads the same in every run)."""
    name = next((new for old, new in _OLD_BREAK_NAMES if reason.startswith(old)), (reason.splitlines() or [""])[0])
    return re.sub(r"<(?:function|bound method|built-in function) ([^ >]+)(?: of <[^>]*>)? at 0x[0-9a-f]+>", r"\1", name)


def compilation_metrics() -> list[dict[str, Any]]:
    """Per-compile records torch keeps in process (deque-limited), as dicts. Private:
    torch._dynamo.utils.get_compilation_metrics -> [CompilationMetrics dataclass] (2.5.1 .. 2.15)."""
    import dataclasses

    fn = _explain_import(
        "torch._dynamo.utils", "get_compilation_metrics", "torch._dynamo.utils.get_compilation_metrics"
    )
    rows = []
    for m in fn():
        if dataclasses.is_dataclass(m):
            rows.append({f.name: getattr(m, f.name, None) for f in dataclasses.fields(m)})
        elif isinstance(m, dict):
            rows.append(dict(m))
    return rows


def recompile_limit() -> int | None:
    """torch._dynamo.config.recompile_limit (2.13 .. 2.15); cache_size_limit on 2.5.1."""
    cfg = importlib.import_module("torch._dynamo.config")
    for name in ("recompile_limit", "cache_size_limit"):
        value = getattr(cfg, name, None)
        if isinstance(value, int):
            return value
    return None


def is_optimized_module(obj: Any) -> bool:
    """isinstance(obj, torch._dynamo.eval_frame.OptimizedModule) (2.5.1 .. 2.15)."""
    try:
        from torch._dynamo.eval_frame import OptimizedModule
    except ImportError:
        return type(obj).__name__ == "OptimizedModule"
    return isinstance(obj, OptimizedModule)


# ---------------------------------------------------------------------------------------------
# Inductor kernel tracing (capture/kernels.py). Checked on 2.5.1, 2.13.0 and 2.15.0.
# ---------------------------------------------------------------------------------------------


def inductor_compilers() -> tuple[Any, Any]:
    """(compile_fx, compile_fx_inner) of torch._inductor.compile_fx: what backend "inductor" runs, and
    the per-graph compiler it calls for the forward, backward and inference graphs (2.5.1 .. 2.15)."""
    try:
        from torch._inductor.compile_fx import compile_fx, compile_fx_inner
    except ImportError as exc:
        raise moved("torch._inductor.compile_fx.compile_fx/compile_fx_inner", exc) from exc
    return compile_fx, compile_fx_inner


def inductor_provenance_patch() -> dict[str, Any]:
    """The inductor config that makes it record which FX nodes and user lines each kernel covers:
    torch._inductor.config.trace.provenance_tracking_level (2.12.1 .. 2.15; 2.9 .. 2.11 unchecked). Empty
    where torch has no provenance tracking (2.5.1, 2.8.0): kernels are then traced by name only."""
    config = importlib.import_module("torch._inductor.config")
    trace = getattr(config, "trace", None)
    if trace is None or not hasattr(trace, "provenance_tracking_level"):
        return {}
    return {"trace.provenance_tracking_level": max(1, int(trace.provenance_tracking_level or 0))}


def without_autograd_cache() -> Any:
    """A context in which AOTAutograd's cache is off (torch._functorch.config.enable_autograd_cache,
    2.5.1 .. 2.15): its hits hand back compiled graphs without calling inductor's per-graph compiler,
    which is where kernels are instrumented. Inductor's FX-graph cache stays on."""
    import contextlib

    functorch_config = importlib.import_module("torch._functorch.config")
    if not hasattr(functorch_config, "enable_autograd_cache"):
        return contextlib.nullcontext()
    return functorch_config.patch(enable_autograd_cache=False)


def inductor_cpp_wrapper(kwargs: dict[str, Any]) -> bool:
    """Whether inductor generates its wrapper in C++ (config cpp_wrapper, or the per-graph compiler's
    cpp_wrapper argument): then its kernels are called from C++. torch._inductor.config.cpp_wrapper
    (2.5.1 .. 2.15); the argument on 2.13 .. 2.15."""
    config = importlib.import_module("torch._inductor.config")
    return bool(kwargs.get("cpp_wrapper") or getattr(config, "cpp_wrapper", False))


def inductor_cudagraphs(kwargs: dict[str, Any]) -> bool:
    """Whether inductor runs this graph as CUDA graphs, asked after compile_fx_inner returns: its
    `cudagraphs` argument, a BoxedBool that post-compile turns off for a graph it cannot capture (a CPU
    graph, say) (2.5.1 .. 2.15)."""
    return bool(kwargs.get("cudagraphs"))


def _wrapper_call_of(fn: Any) -> bool:
    """Whether fn is the `call` of an inductor wrapper module: the module function `call(args)` (2.5.1)
    or the bound `Runner.call(self, args)` the module names `call` (2.13 .. 2.15)."""
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    namespace = getattr(getattr(fn, "__func__", fn), "__globals__", {})
    return code is not None and code.co_name == "call" and namespace.get("call") == fn


def outer_callable(compiled: Any) -> tuple[Any, Any]:
    """(what a CompiledFxGraph's __call__ runs, a function that puts a replacement in its place): its
    `current_callable`, with CUDA graphs inductor's cudagraphify around the wrapper (2.5.1 .. 2.15)."""
    if not hasattr(compiled, "current_callable"):
        raise moved(f"{type(compiled).__name__}.current_callable (inductor's compiled graph)")

    def put(new: Any) -> None:
        compiled.current_callable = new

    return compiled.current_callable, put


def wrapper_call(compiled: Any) -> tuple[Any, Any]:
    """(the generated wrapper's `call`, a function that puts a replacement in its place) for one
    CompiledFxGraph. Its `current_callable` is that `call`, or a closure of inductor's post-compile
    steps around it (input realignment: torch._inductor.utils.align_inputs_from_check_idxs), in which
    case the closure's cell is replaced (2.5.1 .. 2.15). Only this graph object changes: the wrapper
    module, shared with every other load of the same code, is left as it is."""
    pending: list[tuple[Any, Any]] = [outer_callable(compiled)]
    for _ in range(4):
        found: list[tuple[Any, Any]] = []
        for fn, replace in pending:
            if _wrapper_call_of(fn):
                return fn, replace
            for cell in getattr(getattr(fn, "__func__", fn), "__closure__", None) or ():
                inner = cell.cell_contents
                if callable(inner):
                    found.append((inner, lambda new, cell=cell: setattr(cell, "cell_contents", new)))
        pending = found
    raise moved("Python wrapper `call` behind CompiledFxGraph.current_callable (another wrapper hides it)")


def kernel_provenance(compiled: Any) -> dict[str, tuple[list[str], list[str]]]:
    """"<kernel>:<handle>" -> (post-grad FX node names, user stack traces) for one CompiledFxGraph,
    in the order inductor emitted the calls. Read from the graph's own copies, which survive the
    FX-graph cache: inductor_provenance_stack_traces_str and inductor_provenance_mapping_str
    ("cppCodeToPost" / "tritonCodeToPost", forward graphs only); a backward graph's nodes come from the
    live torch._inductor.debug._inductor_triton_kernel_to_post_grad_node_info where its stack traces
    agree (2.12.1 .. 2.15). Empty on torch without provenance tracking (2.5.1, 2.8.0) or when it was off."""
    import json

    stacks = json.loads(getattr(compiled, "inductor_provenance_stack_traces_str", None) or "{}")
    mapping = json.loads(getattr(compiled, "inductor_provenance_mapping_str", None) or "{}")
    nodes: dict[str, list[str]] = {}
    for key, value in mapping.items():
        if key.endswith("CodeToPost") and isinstance(value, dict):
            nodes.update(value)
    debug = importlib.import_module("torch._inductor.debug")
    live_nodes = getattr(debug, "_inductor_triton_kernel_to_post_grad_node_info", {})
    live_stacks = getattr(debug, "_inductor_kernel_stack_trace", {})
    out = {}
    for key in sorted(set(stacks) | set(nodes), key=_handle):
        found = nodes.get(key)
        if found is None and live_stacks.get(key) == stacks.get(key):
            found = live_nodes.get(key)
        out[key] = (list(found or []), list(stacks.get(key) or []))
    return out


def fx_graph_cache_place(compiled: Any) -> tuple[str, str] | None:
    """(inductor's cache directory, this compiled graph's FX-graph cache key), or None when it has no key
    (the cache is off). CompiledFxGraph._fx_graph_cache_key, set on a miss and on a hit, and
    torch._inductor.runtime.cache_dir_utils.cache_dir() (2.13 .. 2.15)."""
    key = getattr(compiled, "_fx_graph_cache_key", None)
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir
    except ImportError:
        return None
    return (cache_dir(), key) if isinstance(key, str) and key.isalnum() else None


def _handle(key: str) -> int:
    tail = key.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else 0


# ---------------------------------------------------------------------------------------------
# Debugging (debug/): stages, randomness, graphs. Checked on 2.5.1, 2.13.0 and 2.15.0.
# ---------------------------------------------------------------------------------------------


def inductor_config_patch(**changes: Any) -> Any:
    """A context that sets torch._inductor.config values (`fallback_random`, ...; 2.5.1 .. 2.15)."""
    config = importlib.import_module("torch._inductor.config")
    return config.patch(**{key: value for key, value in changes.items() if hasattr(config, key)})


def force_eager() -> Any:
    """A context in which every torch.compile'd function runs eagerly, without compiling, code it
    compiled before included: torch.compiler.set_stance("force_eager") from 2.6. Before (2.5.1),
    torch._dynamo.config.disable alone stops new compiles only (cached code still runs), so the frame
    callback that compiled functions install is replaced by none (eval_frame._maybe_set_eval_frame,
    through which 2.5.1's compiled-function wrapper sets it)."""
    import torch

    set_stance = getattr(torch.compiler, "set_stance", None)
    if set_stance is not None:
        return set_stance("force_eager")
    return _no_frame_callback()


@contextlib.contextmanager
def _no_frame_callback() -> Any:
    module = importlib.import_module("torch._dynamo.eval_frame")
    original = getattr(module, "_maybe_set_eval_frame", None)
    if original is None:
        raise moved("torch._dynamo.eval_frame._maybe_set_eval_frame (to run compiled functions eagerly)")
    dynamo_config = importlib.import_module("torch._dynamo.config")
    name = "_maybe_set_eval_frame"  # set by name: mypy does not know the module's attributes
    setattr(module, name, lambda callback: original(None if callback is not None else callback))
    try:
        with dynamo_config.patch(disable=True):
            yield
    finally:
        setattr(module, name, original)


def dynamo_reset() -> None:
    """Forget every compiled graph and cache entry (torch._dynamo.reset, 2.5.1 .. 2.15)."""
    import torch

    torch._dynamo.reset()


def compiler_bisector() -> Any:
    """torch._inductor.compiler_bisector.CompilerBisector (2.6 .. 2.15), or None where torch lacks it."""
    try:
        module = importlib.import_module("torch._inductor.compiler_bisector")
    except ImportError:
        return None
    return getattr(module, "CompilerBisector", None)


def fx_code(gm: Any) -> tuple[str, str]:
    """(import block, forward source) that define `gm`'s code outside of FX: the imports FX builds for
    the names its code uses (torch.fx.graph_module._format_import_block, 2.5.1 .. 2.15)."""
    try:
        from torch.fx.graph_module import _format_import_block
        from torch.package import sys_importer
    except ImportError as exc:
        raise moved("torch.fx.graph_module._format_import_block", exc) from exc
    code = gm.graph.python_code(root_module="self")
    return _format_import_block(code.globals, sys_importer), code.src.strip("\n")


# ---------------------------------------------------------------------------------------------
# Recompile guard (debug/recompiles.py). Checked on 2.5.1, 2.13.0 and 2.15.0.
# ---------------------------------------------------------------------------------------------


def check_recompile_reasons_kept() -> None:
    """torch's per-compile records carry the recompile reason (`recompile_reason`) from 2.8 (checked:
    2.5.1 no, 2.8.0, 2.13, 2.15 yes); before, raise the one-line TorchVersionError."""
    if not torch_at_least(2, 8):
        raise unsupported("the recompile reasons torch keeps after the fact (dynascope.recompiles; "
                          "dynascope.no_recompiles() works here)", "2.8.0")  # fmt: skip


def recompile_refusal() -> Any:
    """A context in which Dynamo raises instead of recompiling a function that already has cache
    entries (a first compile goes ahead): torch._dynamo.config.error_on_recompile (2.5.1 .. 2.15).
    torch.compiler.set_stance("fail_on_recompile") is not it: it refuses first compiles as well."""
    dynamo_config = importlib.import_module("torch._dynamo.config")
    if not hasattr(dynamo_config, "error_on_recompile"):
        raise moved("torch._dynamo.config.error_on_recompile")
    return dynamo_config.patch(error_on_recompile=True)


_REFUSALS = ("Detected recompile when torch.compile stance is 'fail_on_recompile'", "Recompiling function")


def refused_recompile(exc: BaseException) -> dict[str, Any] | None:
    """When `exc` is Dynamo refusing a recompile (under recompile_refusal(), or the RuntimeError of
    set_stance("fail_on_recompile")), what it says: `function`,
    `file`, `reasons` (its guard-failure lines, "0/0: n == 2  # ..."), and `call`, the (fn, args,
    kwargs) of the compiled call it happened in, from torch's compile wrapper frame on the traceback
    (compile_wrapper on 2.13 .. 2.15, _fn before), or None. The frame Dynamo was handed is not kept:
    it is gone once the exception is raised. None for any other exception."""
    text = str(exc)
    if not any(marker in text for marker in _REFUSALS):
        return None
    head, _, tail = text.partition("guard failure(s):")
    reasons, current = [], ""
    for raw in tail.splitlines():
        line = raw.strip()
        if line.startswith("- "):
            line = line[2:]
        if not line or line.startswith(("User stack trace", "File ", "Traceback")) or raw.startswith("    -   "):
            continue
        if re.match(r"^\[?\d+/\d+\]?:", line):
            if current:
                reasons.append(current)
            current = line
    if current:
        reasons.append(current)
    name = re.search(r"function name: '([^']+)'|Recompiling function (\S+)", head)
    file = re.search(r"filename: '([^']+)'|Recompiling function \S+ in ([^:\s]+)", head)
    call = None
    tb = exc.__traceback__
    while tb is not None:
        frame_locals = tb.tb_frame.f_locals
        if tb.tb_frame.f_code.co_name in ("compile_wrapper", "_fn") and "fn" in frame_locals and "args" in frame_locals:
            call = (frame_locals["fn"], tuple(frame_locals["args"]), dict(frame_locals.get("kwargs") or {}))
        tb = tb.tb_next
    return {
        "function": next((g for g in name.groups() if g), None) if name else None,
        "file": next((g for g in file.groups() if g), None) if file else None,
        "reasons": reasons,
        "call": call,
    }


# ---------------------------------------------------------------------------------------------
# Compile profile (debug/compile_profile.py): Dynamo's per-instruction tracing step, the end of a traced
# graph, guard building. Checked on 2.5.1, 2.8.0, 2.13.0 and 2.15.0.
# ---------------------------------------------------------------------------------------------


def hook_dynamo_tracing(wrap_step: Any, wrap_compile_subgraph: Any, wrap_guards: Any) -> Any:
    """Replace three of Dynamo's methods with wrap_*(original):
    InstructionTranslatorBase.step (traces one bytecode instruction of one frame, root or inlined;
    `tx.f_code` and `tx.lineno` name what it traces), OutputGraph.compile_subgraph (finishes a graph
    and calls the backend) and CheckFunctionManager.__init__ (builds a compile's guards). Private:
    torch._dynamo.symbolic_convert.InstructionTranslatorBase.step, torch._dynamo.output_graph.OutputGraph
    .compile_subgraph, torch._dynamo.guards.CheckFunctionManager (2.5.1 .. 2.15). Returns a function
    that puts the originals back."""
    try:
        from torch._dynamo.guards import CheckFunctionManager
        from torch._dynamo.output_graph import OutputGraph
        from torch._dynamo.symbolic_convert import InstructionTranslatorBase
    except ImportError as exc:
        raise moved("torch._dynamo.symbolic_convert.InstructionTranslatorBase", exc) from exc
    places = [(InstructionTranslatorBase, "step", wrap_step), (OutputGraph, "compile_subgraph", wrap_compile_subgraph),
              (CheckFunctionManager, "__init__", wrap_guards)]  # fmt: skip
    originals: list[Any] = [cls.__dict__.get(name) for cls, name, _ in places]
    if not all(callable(fn) for fn in originals):
        raise moved("InstructionTranslatorBase.step / OutputGraph.compile_subgraph / CheckFunctionManager.__init__")
    subs = list(InstructionTranslatorBase.__subclasses__())
    while subs:
        sub = subs.pop()
        if "step" in sub.__dict__:  # a translator with its own step would escape the hook
            raise moved(f"a single InstructionTranslatorBase.step ({sub.__name__} overrides it)")
        subs.extend(sub.__subclasses__())
    for (cls, name, wrap), original in zip(places, originals, strict=True):
        setattr(cls, name, functools.wraps(original)(wrap(original)))

    def remove() -> None:
        for (cls, name, _), original in zip(places, originals, strict=True):
            setattr(cls, name, original)

    return remove


def has_dynamo_profiler() -> bool:
    """Whether this torch ships TORCH_COMPILE_DYNAMO_PROFILER (torch._dynamo.dynamo_profiler: 2.13 .. 2.15;
    not 2.5.1 or 2.8.0)."""
    try:
        importlib.import_module("torch._dynamo.dynamo_profiler")
    except ImportError:
        return False
    return True


def torch_package_dir() -> str:
    """The directory torch is installed in (its code counts as torch internals in a compile profile)."""
    import os

    return os.path.dirname(os.path.abspath(require_torch().__file__))


def metrics_record_recompile_reasons() -> bool:
    """Whether torch's compilation metrics carry each recompile's reason (see check_recompile_reasons_kept)."""
    try:
        check_recompile_reasons_kept()
    except TorchVersionError:
        return False
    return True


# ---------------------------------------------------------------------------------------------
# Stepping (debug/stepping.py): replacing the code Dynamo installs. Checked on 2.5.1, 2.13.0, 2.15.0.
# ---------------------------------------------------------------------------------------------


def register_replacing_bytecode_hook(hook: Any) -> Any:
    """Call hook(old_code, new_code) for every frame Dynamo compiles (resume functions included); a code
    object the hook returns is installed in the cache entry in place of Dynamo's `new_code`, None keeps
    Dynamo's. Returns a function that removes the hook.

    Private: torch._dynamo.convert_frame.register_bytecode_hook, whose result convert_frame uses as the
    frame's code when it is not None (2.5.1 .. 2.15; checked in convert_frame's source on 2.5.1, 2.8.0,
    2.13.0 and 2.15.0). Torch then checks that the returned code keeps the frame's argument names, free
    and cell variables (an AssertionError there fails the compile): the hook must check that itself.
    """
    module = importlib.import_module("torch._dynamo.convert_frame")
    reg = getattr(module, "register_bytecode_hook", None)
    if reg is None or not hasattr(module, "_bytecode_hooks"):
        raise moved("torch._dynamo.convert_frame.register_bytecode_hook (a hook that returns new code)")
    handle = reg(hook)
    return handle.remove


# ---------------------------------------------------------------------------------------------
# Frame probes (capture/frames.py): readings in the code Dynamo generates. Checked on 2.5.1, 2.8.0,
# 2.13.0 and 2.15.0 (Python 3.11; 3.12 and 3.13 on 2.15.0).
# ---------------------------------------------------------------------------------------------

_RETURNS = ("RETURN_VALUE", "RETURN_CONST")
_PREFIX = ("RESUME", "MAKE_CELL", "COPY_FREE_VARS", "NOP")  # what runs before a frame's first line


def add_probes(code: types.CodeType, target: Any, clock: Any, enter_value: int,
               exit_value: int | None) -> types.CodeType:  # fmt: skip
    """`code` with `target.extend((enter_value, clock()))` where it starts and (unless `exit_value` is
    None) `target.extend((exit_value, clock()))` before each return: constants and C calls only.

    Private: torch._dynamo.bytecode_transformation (transform_code_object, create_instruction,
    add_push_null, create_call_function), which writes the bytecode of every Python torch supports and
    keeps jumps, line numbers and exception tables right (2.5.1 .. 2.15; transform_code_object returns
    the code alone before 2.6, (code, tracer output) after). A jump to a return goes to its probe."""
    try:
        bt = importlib.import_module("torch._dynamo.bytecode_transformation")
        make, push_null, call = bt.create_instruction, bt.add_push_null, bt.create_call_function
        transform = bt.transform_code_object
    except (ImportError, AttributeError) as exc:
        raise moved("torch._dynamo.bytecode_transformation (to add frame probes)", exc) from exc

    def probe(value: int) -> list[Any]:
        insts = push_null([make("LOAD_CONST", argval=target), make("LOAD_ATTR", argval="extend")])
        insts.append(make("LOAD_CONST", argval=value))
        insts += push_null(make("LOAD_CONST", argval=clock))
        insts += call(0, False)
        insts.append(make("BUILD_TUPLE", arg=2))
        insts += call(1, False)
        insts.append(make("POP_TOP"))
        return insts

    def insert(instructions: list[Any], at: int, new: list[Any]) -> None:
        """new before instructions[at], in its exception-table range, with the jumps to it moved to new[0]."""
        old = instructions[at]
        for inst in instructions:
            if inst.target is old:
                inst.target = new[0]
        entry = getattr(old, "exn_tab_entry", None)
        if entry is not None:
            for inst in new:
                inst.exn_tab_entry = copy.copy(entry)
            for inst in instructions:  # a range that started at `old` now starts at the probe
                other = getattr(inst, "exn_tab_entry", None)
                if other is not None and other.start is old:
                    other.start = new[0]
            for inst in new:
                if inst.exn_tab_entry.start is old:
                    inst.exn_tab_entry.start = new[0]
        for inst in new:
            inst.starts_line = None
            inst.positions = getattr(old, "positions", None)
        instructions[at:at] = new

    def transformation(instructions: list[Any], _options: dict[str, Any]) -> None:
        at = 0
        while at < len(instructions) and instructions[at].opname in _PREFIX:
            at += 1
        insert(instructions, at, probe(enter_value))
        at = 0
        while exit_value is not None and at < len(instructions):
            if instructions[at].opname in _RETURNS:
                new = probe(exit_value)
                insert(instructions, at, new)
                at += len(new)
            at += 1

    try:
        result = transform(code, transformation)
    except Exception as exc:
        raise moved("torch._dynamo.bytecode_transformation.transform_code_object (to add frame probes)", exc) from exc
    return result[0] if isinstance(result, tuple) else result


def entry_frame_code(compiled: Any) -> types.CodeType | None:
    """The code of the frame torch puts around what torch.compile returned, where it puts one: for
    torch.nn's own modules (nn.Sequential, ...) Dynamo compiles `external_utils.wrap_inline`'s `inner`
    first, not the module's forward. None where the user's code is the first frame. Private:
    torch._dynamo.external_utils (2.5.1 .. 2.15), found through the __wrapped__ chain of the call."""
    module = sys.modules.get("torch._dynamo.external_utils")
    if module is None:
        return None
    home = getattr(module, "__file__", None)
    fn = getattr(compiled, "forward", compiled) if is_optimized_module(compiled) else compiled
    for _ in range(8):  # a few wrappers deep at most
        code = getattr(fn, "__code__", None)
        if code is not None and code.co_filename == home:
            return code
        fn = getattr(fn, "__wrapped__", None)
        if fn is None:
            return None
    return None


def skip_frames_of(fn: Any) -> None:
    """Dynamo never compiles `fn`'s own frame (what it calls, it still does): a wrapper around a compiled
    function. Private: torch._dynamo.eval_frame.skip_code (2.5.1 .. 2.15), as torch's own wrappers use it."""
    module = importlib.import_module("torch._dynamo.eval_frame")
    skip_code = getattr(module, "skip_code", None)
    if skip_code is None:
        raise moved("torch._dynamo.eval_frame.skip_code")
    skip_code(fn.__code__)


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


# ---------------------------------------------------------------------------------------------
# AOTAutograd's cache under traced inductor compiles (capture/backend.py). Run on 2.13.0; the same pieces
# (and signatures) are in 2.14.1's source. Versions before 2.13 keep the hit path elsewhere: off there.
# ---------------------------------------------------------------------------------------------

_AOT_HITS = threading.local()  # .hooks: (check, loaded) while a traced compile runs on this thread


def aot_cache_hits_unsupported() -> str | None:
    """Why AOTAutograd's cache hits cannot be traced on this torch (None where they can): a hit hands back
    inductor's compiled graphs without calling its per-graph compiler, and dynascope instruments them from
    torch._functorch._aot_autograd.aot_autograd_result.GenericAOTAutogradResult._load_and_post_compile
    (2.13; its compiled_fw/compiled_bw loadables keep their FX-graph keys in fx_graph_cache_info or, bundled,
    result._fx_graph_cache_key). Older torches (2.5.1 .. 2.12) keep the hit path elsewhere."""
    if not torch_at_least(2, 13):
        return f"torch {torch_version()} (reading AOTAutograd's cache hits needs 2.13 or later)"
    try:
        result = importlib.import_module("torch._functorch._aot_autograd.aot_autograd_result")
        cache = importlib.import_module("torch._functorch._aot_autograd.autograd_cache")
    except ImportError:
        return "torch._functorch._aot_autograd.aot_autograd_result moved"
    entry = getattr(result, "GenericAOTAutogradResult", None)
    if entry is None or not callable(getattr(entry, "_load_and_post_compile", None)):
        return "GenericAOTAutogradResult._load_and_post_compile moved"
    if not hasattr(cache, "FXGraphCacheMiss"):
        return "torch._functorch._aot_autograd.autograd_cache.FXGraphCacheMiss moved"
    return None


def aot_cache_enabled() -> bool:
    """Whether AOTAutograd's local cache is on (torch._functorch.config.enable_autograd_cache and not
    torch.compiler.config.force_disable_caches; 2.5.1 .. 2.15)."""
    functorch_config = importlib.import_module("torch._functorch.config")
    compiler_config = getattr(importlib.import_module("torch.compiler"), "config", None)
    if getattr(compiler_config, "force_disable_caches", False):
        return False
    return bool(getattr(functorch_config, "enable_autograd_cache", False))


def _aot_loadable_key(part: Any) -> str | None:
    """The FX-graph cache key of one loadable of an AOTAutograd cache entry: FxGraphCacheLoadable's
    fx_graph_cache_info[0], or the bundled CompiledFxGraph's _fx_graph_cache_key (2.13)."""
    info = getattr(part, "fx_graph_cache_info", None)
    if isinstance(info, tuple) and info and isinstance(info[0], str):
        return info[0]
    key = getattr(getattr(part, "result", None), "_fx_graph_cache_key", None)
    return key if isinstance(key, str) else None


def _aot_output_code(fn: Any) -> Any:
    """The CompiledFxGraph behind what a hit hands back: the backward is wrapped in torch._dynamo.disable, a
    function made with functools.wraps (its __wrapped__; it also copies the graph's fields, current_callable
    among them, into its own __dict__, so only the object behind it is the graph)."""
    for _ in range(4):
        if not isinstance(fn, types.FunctionType) or not hasattr(fn, "__wrapped__"):
            return fn
        fn = fn.__wrapped__
    return fn


def _install_aot_hit_hook() -> None:
    result = importlib.import_module("torch._functorch._aot_autograd.aot_autograd_result")
    entry = result.GenericAOTAutogradResult
    original = entry._load_and_post_compile
    if getattr(original, "_dynascope", False):
        return
    miss = importlib.import_module("torch._functorch._aot_autograd.autograd_cache").FXGraphCacheMiss

    @functools.wraps(original)
    def load_and_post_compile(self: Any, args: Any, fx_config: Any) -> Any:
        hooks = getattr(_AOT_HITS, "hooks", None)
        if hooks is None:  # not a traced compile: torch's own path, untouched
            return original(self, args, fx_config)
        check, loaded = hooks
        backward = getattr(self, "compiled_bw", None)
        parts = (("forward", self.compiled_fw), ("backward", backward)) if backward is not None else (
            ("inference", self.compiled_fw),)
        keys = {phase: _aot_loadable_key(part) for phase, part in parts}
        if not check(keys):  # before anything loads: torch counts it as a miss and compiles as usual
            raise miss()
        outputs = original(self, args, fx_config)
        for (phase, _), compiled in zip(parts, outputs[: len(parts)], strict=True):
            loaded(phase, _aot_output_code(compiled))
        return outputs

    load_and_post_compile._dynascope = True  # type: ignore[attr-defined]
    entry._load_and_post_compile = load_and_post_compile


@contextlib.contextmanager
def on_aot_cache_hits(check: Callable[[dict[str, str | None]], bool], loaded: Callable[[str, Any], None]) -> Any:
    """A context in which an AOTAutograd cache hit of a compile on this thread first asks `check` with
    {phase: FX-graph cache key} (phases forward and backward, or inference): False turns the hit into a
    miss (torch's FXGraphCacheMiss, before anything loads), so the graphs compile through inductor's
    per-graph compiler; after a hit, `loaded(phase, compiled graph)` is called for each graph, which
    must not raise. Raises TorchVersionError where aot_cache_hits_unsupported() gives a reason."""
    reason = aot_cache_hits_unsupported()
    if reason is not None:
        raise moved(f"AOTAutograd's cache hit path: {reason}")
    _install_aot_hit_hook()
    before = getattr(_AOT_HITS, "hooks", None)
    _AOT_HITS.hooks = (check, loaded)
    try:
        yield
    finally:
        _AOT_HITS.hooks = before


def inductor_cache_dir() -> str | None:
    """Inductor's cache directory (torch._inductor.runtime.cache_dir_utils.cache_dir(), 2.13 .. 2.15)."""
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir
    except ImportError:
        return None
    return str(cache_dir())


# ---------------------------------------------------------------------------------------------
# DDPOptimizer (compiled DistributedDataParallel). Checked on 2.13.0; on another torch a moved piece raises.
# ---------------------------------------------------------------------------------------------


def ddp_split() -> dict[str, Any] | None:
    """Where the current compile is one of DDPOptimizer's: Dynamo hands a graph of a module run inside
    DistributedDataParallel to DDPOptimizer.compile_fn, which splits it at DDP's gradient buckets and calls
    the backend once per piece (torch._dynamo.backends.distributed, checked on 2.13). None when no
    DDPOptimizer compile is on this thread's stack; else {"index": the piece being compiled (0-based, forward
    order; None while compile_fn itself runs, or where it did not split: one bucket), "count": its buckets,
    "cap": bucket_bytes_cap, "first_cap": first_bucket_cap, "buckets": [{"bytes", "params"}] in forward
    order (params: the graph's names of each bucket's parameters), "inputs": the whole graph's input names}.
    Read from compile_fn's frame (its `self`, `gm` and `buckets`) and SubmodCompiler.run_node's (`n`: the
    submodule being compiled)."""
    module = sys.modules.get("torch._dynamo.backends.distributed")
    if module is None:  # never imported: Dynamo imports it for its first DDP compile
        return None
    try:
        compile_code = module.DDPOptimizer.compile_fn.__code__
        run_node_code = module.SubmodCompiler.run_node.__code__
    except AttributeError as exc:
        raise moved("torch._dynamo.backends.distributed.DDPOptimizer.compile_fn and SubmodCompiler.run_node",
                    exc) from exc
    node = None
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code is run_node_code and node is None:
            node = frame.f_locals.get("n")
        elif code is compile_code:
            optimizer = frame.f_locals.get("self")
            buckets = frame.f_locals.get("buckets") or getattr(optimizer, "buckets", None) or []
            match = re.search(r"submod_(\d+)$", str(getattr(node, "target", "")))
            index = int(match.group(1)) if match and len(buckets) > 1 else None
            described = [{"bytes": int(getattr(b, "size", 0)), "params": [str(p) for p in getattr(b, "params", [])]}
                         for b in buckets]  # fmt: skip
            whole = frame.f_locals.get("gm")
            nodes = getattr(getattr(whole, "graph", None), "nodes", [])
            return {
                "inputs": [str(n.target) for n in nodes if getattr(n, "op", None) == "placeholder"],
                "index": index if index is not None and index < len(buckets) else None,
                "count": len(buckets),
                "cap": getattr(optimizer, "bucket_bytes_cap", None),
                "first_cap": getattr(optimizer, "first_bucket_cap", None),
                "buckets": described,
            }
        frame = frame.f_back
    return None


# -- collectives (capture/collectives.py) ----------------------------------------------------------


def sequence_reader(group: Any) -> Callable[[], int] | None:
    """The group's collective counter, as a bound method to call after each collective it issues, or None
    where the backend keeps none (the "fake" test backend). Private:
    ProcessGroup._get_sequence_number_for_group (2.5.1 .. 2.15; gloo and NCCL count every collective)."""
    reader = getattr(group, "_get_sequence_number_for_group", None)
    if reader is None:
        return None
    try:
        reader()
    except RuntimeError:  # "ProcessGroup custom does not yet support sequence numbers"
        return None
    return reader


def dynamo_treats_like(wrapper: Callable, original: Callable) -> Callable[[], None]:
    """Make Dynamo trace a call to `wrapper` exactly as a call to `original`: rewritten to the same
    functional collective (torch.distributed._functional_collectives.traceable_collective_remaps, 2.5.1 ..
    2.15) and given the same trace rule (torch._dynamo.trace_rules.get_torch_obj_rule_map(), 2.5.1 ..
    2.15), so that what Dynamo skips it skips in both. Returns the call that undoes it."""
    undo: list[Callable[[], None]] = []
    try:
        remaps = importlib.import_module("torch.distributed._functional_collectives").traceable_collective_remaps
        trace_rules = importlib.import_module("torch._dynamo.trace_rules")
        rules = trace_rules.get_torch_obj_rule_map()
        rule = trace_rules.lookup(original)
    except (ImportError, AttributeError) as exc:
        raise moved("torch.distributed._functional_collectives.traceable_collective_remaps", exc) from exc
    if original in remaps:
        remaps[wrapper] = remaps[original]
        undo.append(lambda: remaps.pop(wrapper, None))
    if rule is not None and wrapper not in rules:
        rules[wrapper] = rule
        undo.append(lambda: rules.pop(wrapper, None))

    def undo_all() -> None:
        for step in undo:
            step()

    return undo_all


def ddp_register_comm_hook(reducer: Any, state: Any, hook: Callable) -> None:
    """Register a Python comm hook on a DDP reducer, as DistributedDataParallel.register_comm_hook does
    after its own checks. Private: torch.distributed._register_comm_hook (2.5.1 .. 2.15)."""
    dist = importlib.import_module("torch.distributed")
    register = getattr(dist, "_register_comm_hook", None)
    if register is None:
        raise moved("torch.distributed._register_comm_hook")
    register(reducer, state, hook)


def ddp_reducer_in_use(ddp: Any) -> bool:
    """Whether DDP's C++ reducer all-reduces this model's gradients: not where compiled autograd's Python
    reducer does (DistributedDataParallel._use_python_reducer, 2.5.1 .. 2.15) nor where every parameter's
    all-reduce is delayed (_delay_all_reduce_all_params)."""
    if getattr(ddp, "reducer", None) is None:
        return False
    return not (getattr(ddp, "_use_python_reducer", False) or getattr(ddp, "_delay_all_reduce_all_params", False))


def ddp_comm_hook_registration(replacement: Callable) -> Any:
    """A context in which DDP's register_comm_hook / _register_builtin_comm_hook do all their own checks and
    bookkeeping but hand the reducer registration (torch.distributed._register_comm_hook and
    _register_builtin_comm_hook, 2.5.1 .. 2.15, which DDP looks up in torch.distributed at call time) to
    `replacement(kind, reducer, *args)`, kind "python" or "builtin"."""
    dist: Any = importlib.import_module("torch.distributed")
    if not hasattr(dist, "_register_comm_hook") or not hasattr(dist, "_register_builtin_comm_hook"):
        raise moved("torch.distributed._register_comm_hook")

    @contextlib.contextmanager
    def registration() -> Any:
        python, builtin = dist._register_comm_hook, dist._register_builtin_comm_hook
        dist._register_comm_hook = functools.partial(replacement, "python")
        dist._register_builtin_comm_hook = functools.partial(replacement, "builtin")
        try:
            yield
        finally:
            dist._register_comm_hook, dist._register_builtin_comm_hook = python, builtin

    return registration()


def skip_frames_recursively(fn: Any) -> None:
    """Dynamo never compiles `fn`'s frame nor any frame it calls (a wrapper that runs eagerly after a
    graph break, around torch's own function, which Dynamo skips there too). Private:
    torch._dynamo.eval_frame.set_code_exec_strategy with FrameExecStrategy(SKIP, SKIP) (2.6 .. 2.15); where
    it is missing, skip_frames_of (the frame alone)."""
    try:
        eval_frame = importlib.import_module("torch._dynamo.eval_frame")
        types_module = importlib.import_module("torch._dynamo.types")
        skip = types_module.FrameAction.SKIP
        strategy = types_module.FrameExecStrategy(skip, skip)
        eval_frame.set_code_exec_strategy(fn.__code__, strategy)
    except (ImportError, AttributeError, TypeError):
        skip_frames_of(fn)


def launcher_parser() -> Any:
    """torchrun's own argument parser (torch.distributed.run.get_args_parser, 1.10 .. 2.15), so that
    `dynascope run torchrun ARGS` reads the launcher's options exactly as torchrun does."""
    require_torch()
    try:
        run = importlib.import_module("torch.distributed.run")
        return run.get_args_parser()
    except (ImportError, AttributeError):
        raise moved("torch.distributed.run.get_args_parser") from None
