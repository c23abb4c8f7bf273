"""`explain(fn)`: what Dynamo has cached for a function now; `why_recompile(fn, *args)`: which guard an
input would fail. Both read torch's structures through dynascope._torch and never recompile, run or
clear anything."""

from __future__ import annotations

import gc
import inspect
import linecache
import re
import sys
import types
from dataclasses import dataclass, field
from typing import Any

from dynascope import _torch
from dynascope.artifacts.explanation import (
    CacheEntry,
    CodeView,
    Explanation,
    FunctionRef,
    ResumeFunction,
    Subgraph,
    UserLine,
)
from dynascope.errors import DynascopeError, TorchVersionError
from dynascope.explain import torch_records as records
from dynascope.explain.active_observer import SESSION
from dynascope.explain.code import decompile_code, line_at_offset, source_with_marker
from dynascope.explain.guards import charge_to_user_frames, group_flat, group_guards
from dynascope.trace import probes

MAX_DEPTH = 12
_UUID_SUFFIX = re.compile(r"(__compiled_fn_\d+)_[0-9a-f]{8}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{12}\b")


class NotCompiledError(DynascopeError, ValueError):
    """explain() was given something Dynamo has no cache entries for."""


class ExplainTargetError(DynascopeError, TypeError):
    """explain() was given something that is not a function, method, module or code object."""


# --------------------------------------------------------------------------------------------------
# Finding the code object Dynamo caches on
# --------------------------------------------------------------------------------------------------


@dataclass
class Target:
    code: types.CodeType
    globals: dict[str, Any]
    name: str
    qualname: str
    bind_self: Any = None  # the module instance for an nn.Module / bound method
    signature_of: Any = None  # callable whose signature binds why_recompile's arguments


def resolve(obj: Any) -> Target:
    """Map what a user passes to explain() onto the code object that holds Dynamo's cache entries."""
    _torch.require_torch()
    import torch

    original = obj
    self_obj = None
    for _ in range(8):
        if isinstance(obj, types.MethodType):
            self_obj, obj = obj.__self__, obj.__func__
            continue
        if _torch.is_optimized_module(obj):
            # torch.nn.* modules compiled directly run through Dynamo's wrap_inline frame: the cache
            # entries are on that wrapper's code, reached through the compiled module's forward
            inner = _torch.unwrap_compiled(vars(obj).get("_forward") or vars(obj).get("forward"))
            if isinstance(inner, types.FunctionType) and _is_wrap_inline(inner.__code__):
                obj = inner
            else:
                obj = _torch.unwrap_compiled(obj)
            continue
        if isinstance(obj, torch.nn.Module):
            self_obj, obj = obj, type(obj).forward
            continue
        inner = _torch.unwrap_compiled(obj)
        if inner is not obj:
            obj = inner
            continue
        break
    if isinstance(obj, types.CodeType):
        g = globals_for_code(obj)
        return Target(obj, g, obj.co_name, obj.co_qualname if hasattr(obj, "co_qualname") else obj.co_name)
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    code = getattr(obj, "__code__", None)
    if not isinstance(code, types.CodeType):
        raise ExplainTargetError(
            f"cannot explain {type(original).__name__} {original!r:.80}: pass a function, a method, an nn.Module, "
            "a code object, or what torch.compile returned for one of them"
        )
    return Target(code, getattr(obj, "__globals__", {}) or {}, obj.__name__,
                  getattr(obj, "__qualname__", obj.__name__), self_obj, obj)


def _is_wrap_inline(code: types.CodeType) -> bool:
    return code.co_name == "inner" and code.co_filename.replace("\\", "/").endswith("_dynamo/external_utils.py")


WRAP_INLINE_NOTE = ("torch.compile was given a torch.nn module (or a builtin) directly, so Dynamo compiled torch's "
                    "wrapper frame torch._dynamo.external_utils.wrap_inline.inner: in its guards `fn` is your "
                    "module and `args`/`kwargs` are the call's arguments")


def globals_for_code(code: types.CodeType) -> dict[str, Any]:
    """The globals of the function that owns `code` (Dynamo puts compiled graphs and resume functions
    there). Found through the function object, or the module whose file the code came from."""
    for ref in gc.get_referrers(code):
        if isinstance(ref, types.FunctionType) and ref.__code__ is code:
            return ref.__globals__
    for mod in list(sys.modules.values()):
        if getattr(mod, "__file__", None) == code.co_filename:
            return vars(mod)
    return {}


# --------------------------------------------------------------------------------------------------
# Building the Explanation
# --------------------------------------------------------------------------------------------------


def explain(fn: Any, *, observer: Any = None) -> Explanation:
    """What Dynamo has cached for `fn` now, as an Explanation (print() it for the report).

    `fn` may be the function torch.compile returned, the original function, an nn.Module, its forward,
    or a compiled module. Nothing is recompiled, run or cleared. Raises NotCompiledError when Dynamo
    has no cache entries for it. Observations (graph breaks, FX code with non-eager backends) come from
    `observer`, else the active or most recent dynascope observer, else only torch's own records.
    """
    target = resolve(fn)
    if observer is None:
        observer = SESSION.current()
    expl = explain_code(target.code, target.globals, name=target.name, qualname=target.qualname,
                        observer=observer)
    if not expl.cache_entries:
        if expl.notes:  # torch's cache entry list itself moved: say that, not "never compiled"
            raise TorchVersionError(expl.notes[0])
        raise NotCompiledError(
            f"{target.qualname} ({target.code.co_filename}:{target.code.co_firstlineno}) has no Dynamo cache "
            "entries: call the torch.compile'd version at least once before explaining it "
            "(a torch._dynamo.reset() also clears them)"
        )
    return expl


def explain_code(code: types.CodeType, globals_: dict[str, Any], *, name: str | None = None,
                 qualname: str | None = None, observer: Any = None, kind: str = "function",
                 source_code: types.CodeType | None = None, _depth: int = 0) -> Explanation:
    """The Explanation for one code object (empty cache_entries if it has none)."""
    source_code = source_code or code
    src = source_with_marker(source_code, None) if kind == "function" else None
    expl = Explanation(
        function=FunctionRef(name=name or code.co_name, qualname=qualname or getattr(code, "co_qualname", code.co_name),
                             file=code.co_filename, line=code.co_firstlineno),
        source=src, kind=kind,
    )
    try:
        entries = _torch.cache_entries(code)
    except TorchVersionError as exc:
        expl.notes.append(str(exc))
        return expl
    if kind == "function" and entries and _is_wrap_inline(code):
        expl.notes.append(WRAP_INLINE_NOTE)
    for index, entry in enumerate(entries, 1):
        expl.cache_entries.append(
            _entry(index, entry, globals_, source_code, observer, expl.notes, _depth, code)
        )
    if kind == "function":
        attach_records(expl, observer)
    return expl


def _entry(index: int, entry: Any, globals_: dict[str, Any], source_code: types.CodeType, observer: Any,
           notes: list[str], depth: int, frame_code: types.CodeType) -> CacheEntry:
    cid = _torch.entry_compile_id(entry)
    user_file = source_code.co_filename
    try:
        groups, count = group_guards(_torch.guard_tree(entry), user_file)
    except TorchVersionError as exc:
        _note(notes, str(exc))
        try:
            groups, count = group_flat(_torch.guard_code_parts(entry), user_file)
        except TorchVersionError as exc2:
            _note(notes, str(exc2))
            groups, count = [], 0
    try:
        _torch.check_guard_user_lines()
    except TorchVersionError as exc:
        _note(notes, str(exc))
    new_code = probes.original(entry.code)  # Dynamo's code, without dynascope's frame probes
    text, ok = decompile_code(new_code)
    if ok:  # Dynamo's graph names carry a uuid; the report names subgraphs without it
        text = _UUID_SUFFIX.sub(r"\1", text)
    try:
        backend = _torch.entry_backend_name(entry)
    except TorchVersionError as exc:
        _note(notes, str(exc))
        backend = None
    result = CacheEntry(index=index, compile_id=cid, backend=backend, guard_count=count,
                        guards=groups, code=CodeView(name=new_code.co_name, source=text, decompiled=ok))
    graphs = [n for n in new_code.co_names if n.startswith("__compiled_fn_")]
    for gname in graphs:
        result.subgraphs.append(_subgraph(gname, globals_.get(gname), cid, observer, len(graphs)))
    charge_to_user_frames(result.guards, [sg.fx_code for sg in result.subgraphs if sg.fx_code])
    for rname in [n for n in new_code.co_names if n.startswith("__resume_at_")]:
        result.resume_functions.append(_resume(rname, globals_.get(rname), source_code, observer, notes, depth,
                                                     frame_code))
    return result


def _note(notes: list[str], text: str) -> None:
    if text not in notes:
        notes.append(text)


def _subgraph(gname: str, compiled: Any, cid: str, observer: Any, n_graphs: int) -> Subgraph:
    m = re.match(r"(__compiled_fn_\d+)", gname)
    sg = Subgraph(name=m.group(1) if m else gname, global_name=gname)
    gm = _torch.graph_module_of(compiled) if compiled is not None else None
    if gm is not None:
        try:
            sg.fx_code = gm.print_readable(print_output=False).rstrip()
        except Exception:  # noqa: BLE001 - print_readable may fail on odd graphs; the plain code will do
            sg.fx_code = str(getattr(gm, "code", "")).strip() or None
        nodes = list(gm.graph.nodes)
        sg.node_count = len(nodes)
        sg.op_count = sum(1 for n in nodes if n.op in ("call_function", "call_method", "call_module"))
    if observer is not None and n_graphs == 1:
        graph = observer.graph_for(cid)
        if graph is not None:
            if sg.fx_code is None:
                sg.fx_code = graph.get("code")
            if sg.op_count is None:
                sg.op_count = graph.get("op_count")
            if sg.node_count is None:
                sg.node_count = graph.get("node_count")
    if sg.op_count is None and n_graphs == 1:
        try:
            for row in _torch.compilation_metrics():
                if str(row.get("compile_id")) == cid and row.get("graph_op_count") is not None:
                    sg.op_count = row["graph_op_count"]
        except TorchVersionError:
            pass
    return sg


def _resume(rname: str, fn: Any, source_code: types.CodeType, observer: Any, notes: list[str],
            depth: int, frame_code: types.CodeType) -> ResumeFunction:
    m = re.match(r"__resume_at_(\d+)_(\d+)", rname)
    offset = int(m.group(1)) if m else None
    code = getattr(fn, "__code__", None)
    code_name = code.co_name if code is not None else rname
    ml = re.search(r"_at_(\d+)$", code_name)
    line = int(ml.group(1)) if ml else None
    rf = ResumeFunction(name=rname, code_name=code_name, offset=offset, line=line,
                        source=source_with_marker(source_code, line))
    cont = line_at_offset(frame_code, offset)  # the offset is in the bytecode of the frame that broke
    if cont is not None:
        text = linecache.getline(source_code.co_filename, cont).strip() or None
        rf.continues_at = UserLine(file=source_code.co_filename, line=cont, code=text)
    if code is not None and depth < MAX_DEPTH:
        sub = explain_code(code, getattr(fn, "__globals__", {}), name=rname, qualname=code_name,
                           observer=observer, kind="resume", source_code=source_code, _depth=depth + 1)
        for n in sub.notes:
            _note(notes, n)
        sub.notes = []
        rf.explanation = sub if sub.cache_entries else None
    return rf


def _frame_ids(expl: Explanation) -> set[str]:
    return {f for f in (records.frame_id(e.compile_id) for e in expl.all_entries()) if f}


def attach_records(expl: Explanation, observer: Any) -> None:
    """Fill the function's compile times and recompiles (and graph breaks, when observed)."""
    frames = _frame_ids(expl)
    file, name = expl.function.file, expl.function.name
    if observer is not None:
        times = [ct for ct in observer.compile_times if records.frame_id(ct.compile_id) in frames]
        recs = [rc for rc in observer.recompiles if records.frame_id(rc.compile_id) in frames]
        expl.graph_breaks = [gb for gb in observer.graph_breaks if _in_function(gb, expl)]
        if times or recs:
            expl.compile_times, expl.recompiles = times, recs
            return
    try:
        rows = _torch.compilation_metrics()
    except TorchVersionError as exc:
        _note(expl.notes, str(exc))
        return
    for row in rows:
        fid = records.frame_id(str(row.get("compile_id")))
        if fid not in frames and not (row.get("co_name") == name and row.get("co_filename") == file):
            continue
        expl.compile_times.append(records.compile_time(row))
        rc = records.recompile(row)
        if rc is not None:
            expl.recompiles.append(rc)


def _in_function(gb: Any, expl: Explanation) -> bool:
    if gb.file != expl.function.file or gb.line is None:
        return False
    src = expl.source or ""
    start = expl.function.line or 0
    return start <= gb.line < start + max(1, src.count("\n") + 1)


# --------------------------------------------------------------------------------------------------
# why_recompile
# --------------------------------------------------------------------------------------------------


@dataclass
class EntryCheck:
    index: int
    compile_id: str
    passes: bool
    reasons: list[str] = field(default_factory=list)


@dataclass
class RecompileCheck:
    """The answer of why_recompile: would these arguments hit a cache entry, and if not, why."""

    function: str
    would_recompile: bool
    hit: str | None  # compile id of the entry that would run
    entries: list[EntryCheck] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        if not self.would_recompile:
            return f"{self.function}: these inputs pass the guards of cache entry {self.hit}; no recompile."
        lines = [f"{self.function}: these inputs would recompile; every cache entry's guards fail:"]
        for e in self.entries:
            lines.append(f"  - {e.compile_id}: " + ("; ".join(e.reasons) or "guards fail"))
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __bool__(self) -> bool:
        return self.would_recompile

    def to_dict(self) -> dict[str, Any]:
        import dataclasses

        return dataclasses.asdict(self)


def _f_locals(target: Target, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    fn = target.signature_of
    if fn is None:
        raise ExplainTargetError("why_recompile needs a function, method or module, not a code object")
    sig = inspect.signature(fn)
    bound = sig.bind(*args, **kwargs) if target.bind_self is None else sig.bind(target.bind_self, *args, **kwargs)
    bound.apply_defaults()
    f_locals = dict(bound.arguments)
    # Dynamo's frame locals also hold the function's closure variables (guards may read them)
    code = getattr(fn, "__code__", None)
    closure = getattr(fn, "__closure__", None) or ()
    if code is not None:
        for name, cell in zip(code.co_freevars, closure, strict=False):
            try:
                f_locals.setdefault(name, cell.cell_contents)
            except ValueError:  # empty cell
                pass
    return f_locals


def _with_actual(failure: Any, f_locals: dict[str, Any]) -> str:
    """A constant guard ("n == 2") does not say what n is now; we know, so say it."""
    name = failure.subject
    if failure.actual is None and failure.expected is not None and name in f_locals:
        value = f_locals[name]
        if isinstance(value, (int, float, bool, str, type(None))):
            return f"{failure.reason} (now {value!r})"
    return failure.reason


def why_recompile(fn: Any, *args: Any, **kwargs: Any) -> RecompileCheck:
    """Would calling the compiled `fn(*args, **kwargs)` recompile? Says which cache entry's guard fails
    for these inputs and why, by evaluating the guards only (fn is not run, nothing is compiled)."""
    target = resolve(fn)
    try:
        f_locals = _f_locals(target, args, kwargs)
    except TypeError as exc:
        raise ExplainTargetError(f"arguments do not match {target.qualname}: {exc}") from exc
    entries = _torch.cache_entries(target.code)
    if not entries:
        raise NotCompiledError(
            f"{target.qualname} has no Dynamo cache entries: call the torch.compile'd version first"
        )
    result = RecompileCheck(function=target.qualname, would_recompile=True, hit=None)
    for index, entry in enumerate(entries, 1):
        cid = _torch.entry_compile_id(entry)
        try:
            passed, parts = _torch.check_entry_guards(entry, f_locals)
        except TorchVersionError as exc:
            _note(result.notes, str(exc))
            passed, parts = False, []
        reasons: list[str] = []
        if not passed:
            try:
                text = _torch.guard_fail_reason(entry, f_locals)
            except TorchVersionError as exc:
                _note(result.notes, str(exc))
                text = None
            failures = [records.parse_failure(t) for t in records.split_reasons(text)] if text else []
            if not failures:
                failures = [records.parse_failure(p) for p in parts]
            reasons = [_with_actual(f, f_locals) for f in failures]
        result.entries.append(EntryCheck(index=index, compile_id=cid, passes=passed, reasons=reasons))
        if passed:
            result.would_recompile, result.hit = False, cid
            break
    return result
