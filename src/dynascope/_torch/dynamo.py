"""Dynamo: cache entries, guards, bytecode hooks, graph breaks and compile metrics (explain/), the recompile
guard, the compile profile's hooks, stepping, frame probes, and the debugging stages (debug/, capture/frames.py).

Part of dynascope._torch, the one home of torch's private APIs (see its __init__)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import importlib
import inspect
import re
import sys
import types
from typing import Any

from dynascope._torch.version import moved, require_torch, torch_at_least, unsupported
from dynascope.errors import TorchVersionError

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
