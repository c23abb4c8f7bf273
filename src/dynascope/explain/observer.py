"""Watch compilation as it happens: graph breaks, recompiles, cache-limit hits, eager fallbacks and
compile times, joined by compile id; and remember every function compiled so all can be explained.

    with dynascope.observe() as obs:
        model(x)
    print(obs.report())

`start_observing()` / `stop_observing()` do the same for an always-on mode (`dynascope run`).
Sources (all through dynascope._torch): torch's structured-trace logger (the records tlparse reads),
Dynamo's bytecode hook, and torch's compilation metrics.
"""

from __future__ import annotations

import ast
import contextlib
import gc
import json
import threading
import types
from collections.abc import Iterator
from typing import Any

from dynascope import _torch
from dynascope.artifacts.explanation import (
    CacheLimitHit,
    CompileTime,
    DdpSplit,
    EagerFallback,
    Explanation,
    GraphBreak,
    Recompile,
    Report,
)
from dynascope.artifacts.memory import GraphMemory
from dynascope.capture import graph_memory
from dynascope.errors import DynascopeError, TorchVersionError
from dynascope.explain import torch_records as records
from dynascope.explain.active_observer import SESSION
from dynascope.explain.api import explain_code, globals_for_code
from dynascope.trace.spans import OpenSpans
from dynascope.userframes import first_user_frame, is_library_file


class ObserverError(DynascopeError, RuntimeError):
    """Observer misuse (start twice, and the like)."""


class Observer:
    def __init__(self) -> None:
        self.graph_breaks: list[GraphBreak] = []
        self.recompiles: list[Recompile] = []
        self.compile_times: list[CompileTime] = []
        self.cache_limit_hits: list[CacheLimitHit] = []
        self.eager_fallbacks: list[EagerFallback] = []
        self.ddp_splits: list[DdpSplit] = []
        self.memory: list[GraphMemory] = []  # one per forward/backward partition (capture/graph_memory.py)
        self._aot_cache_hits: set[str] = set()  # compile ids whose graphs AOTAutograd's cache served
        self.notes: list[str] = []
        self._graphs: dict[str, dict[str, Any]] = {}
        self._codes: dict[types.CodeType, None] = {}  # ordered set of compiled original code objects
        self._pending_reasons: dict[str, list[str]] = {}
        self._started: set[str] = set()  # compile ids Dynamo started tracing
        self._gb_seen: dict[tuple[Any, ...], GraphBreak] = {}
        self._gb_cids: set[tuple[Any, ...]] = set()
        self._strings: dict[int, str] = {}
        self._frames: dict[str, tuple[str, str, int]] = {}  # frame id -> (name, file, line)
        self._callers: dict[str, tuple[str, int]] = {}  # compile id -> (file, line) of the first user frame calling it
        self._removers: list[Any] = []
        self._metrics_before: int = 0
        self._open = OpenSpans()  # torch's compile-phase timers, per compile id
        self._phases: dict[str, dict[str, float]] = {}
        self._times_by_cid: dict[str, CompileTime] = {}
        self._lock = threading.Lock()
        self._break_mark: int | None = None
        self.active = False
        self.uncached: list[str] = []  # compiled while observed, but no cache entries left at report time

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> Observer:
        if self.active:
            raise ObserverError("this observer is already running; call stop() first")
        _torch.require_torch()
        try:
            self._metrics_before = len(_torch.compilation_metrics())
        except TorchVersionError as exc:
            self._note(str(exc))
        try:
            self._removers.append(_torch.add_structured_trace_handler(self._on_trace))
        except TorchVersionError as exc:
            self._note(str(exc))
        self._break_mark = self._graph_break_mark()
        try:
            self._removers.append(graph_memory.listen(self._on_account))
        except TorchVersionError as exc:
            self._note(f"{exc} (what compiled graphs save for the backward is not shown)")
        try:
            self._removers.append(_torch.register_bytecode_hook(self._on_bytecode))
        except TorchVersionError as exc:
            self._note(str(exc))
        self.active = True
        SESSION.started(self)
        return self

    def stop(self) -> Observer:
        self._resolve_limit_hits()
        for remove in reversed(self._removers):
            with contextlib.suppress(Exception):
                remove()
        self._removers.clear()
        self.active = False
        SESSION.stopped(self)
        return self

    def __enter__(self) -> Observer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    # -- torch callbacks (must never raise into torch) --------------------------------------------

    def _on_bytecode(self, old_code: Any, new_code: Any) -> None:
        try:
            if isinstance(old_code, types.CodeType):
                with self._lock:
                    self._codes[old_code] = None
        except Exception:  # noqa: BLE001 - never raise into torch's bytecode hook
            pass

    def _on_account(self, account: GraphMemory) -> None:
        with self._lock:
            account.part = 1 + sum(1 for m in self.memory if m.compile_id == account.compile_id)
            self.memory.append(account)

    def _on_trace(self, record: dict[str, Any], payload: str | None) -> None:
        try:
            self._handle(record, payload)
        except Exception as exc:  # noqa: BLE001 - never break the user's compile
            self._note(f"could not read a torch compile record ({type(exc).__name__}: {exc})")

    def _handle(self, record: dict[str, Any], payload: str | None) -> None:
        key = next(iter(record), None)
        cid = _torch.record_compile_id(record)
        with self._lock:
            if key == "str":
                self._on_string(record["str"])
            elif key == "dynamo_start":
                self._started.add(str(cid))
                self._on_start(cid, record["dynamo_start"])
                self._break_mark = self._graph_break_mark()
            elif key == "optimize_ddp_split_graph":
                self._on_ddp_split(cid)
            elif key == "dynamo_output_graph" and cid and payload:
                self._graphs.setdefault(cid, {})["code"] = payload.rstrip()
            elif key == "artifact":
                meta = record["artifact"]
                if isinstance(meta, str):
                    meta = ast.literal_eval(meta)
                name = meta.get("name")
                if name == "dynamo_graph_break_reason" and payload:
                    self._on_graph_break(cid, payload)
                elif name == "recompile_reasons" and cid and payload:
                    self._pending_reasons[cid] = records.split_reasons(payload)
            elif key == "chromium_event" and payload:
                self._on_chromium(payload, _torch.record_compile_id(record))
            elif key == "compilation_metrics":
                self._on_listed_breaks(cid)
                row = record["compilation_metrics"]
                if isinstance(row, dict):
                    self._on_metrics(row)

    _PHASES = ("entire_frame_compile", "backend_compile", "create_aot_dispatcher_function",
               "compile_fx_inner", "inductor_compile", "compile_fx.<locals>.fw_compiler_base",
               "compile_fx.<locals>.bw_compiler_base", "compile_fx.<locals>.bw_compiler",
               records.LAZY_BACKWARD)

    def _on_chromium(self, payload: str, record_cid: str | None) -> None:
        if not any(name in payload for name in self._PHASES):
            return
        event = json.loads(payload)
        name = event.get("name")
        if name not in self._PHASES:
            return
        cid = str((event.get("args") or {}).get("compile_id") or record_cid)
        ph, ts = event.get("ph"), float(event.get("ts") or 0.0)
        if ph == "B":
            self._open.begin(cid, name, ts)
            return
        span = self._open.end(cid, name, ts) if ph == "E" else None
        if span is None or not span.outermost:
            return  # nested call of the same phase: count the outermost only
        if name != records.LAZY_BACKWARD and any(
            key == cid and open_name == records.LAZY_BACKWARD for key, open_name, _, _ in self._open.open_spans()
        ):  # inside a backward compiled lazily, at its first backward(): not part of the frame's compile
            name = f"{records.LAZY_BACKWARD}:{name}"
        durations = self._phases.setdefault(cid, {})
        durations[name] = durations.get(name, 0.0) + (span.end - span.start) / 1e6
        ct = self._times_by_cid.get(cid)
        if ct is not None:
            records.apply_phases(ct, durations)

    def _on_ddp_split(self, cid: str | None) -> None:
        """DDPOptimizer logs its split graph from inside its compile_fn, where its buckets can be read."""
        try:
            split = _torch.ddp_split()
        except TorchVersionError as exc:
            self._note(str(exc))
            return
        if split is None:
            return
        name, file, line = self._frames.get(records.frame_id(cid) or "", (None, None, None))
        self.ddp_splits.append(records.ddp_split(split, cid, _torch.graph_name(None), name, file, line))

    def _on_string(self, text: Any) -> None:
        try:
            path, idx = ast.literal_eval(text) if isinstance(text, str) else text
            self._strings[int(idx)] = str(path)
        except (ValueError, SyntaxError, TypeError):
            pass

    def _on_start(self, cid: str | None, info: Any) -> None:
        if isinstance(info, str):
            info = ast.literal_eval(info)
        stack = (info or {}).get("stack") or []
        if not stack or cid is None:
            return
        files = [self._strings.get(f) if isinstance(f := frame.get("filename"), int) else str(f) for frame in stack]
        caller = first_user_frame(files[:-1])
        if caller is not None:
            self._callers[str(cid)] = (str(files[caller]), int(stack[caller].get("line") or 0))
        last = stack[-1]
        file = files[-1]
        fid = records.frame_id(cid) or cid
        if file is not None and fid not in self._frames:  # torch interns file names once per process
            self._frames[fid] = (str(last.get("name")), file, int(last.get("line") or 0))

    def _resolve_limit_hits(self) -> None:
        """Recompile reasons logged for a compile that never started: torch refused it at the recompile
        limit. Torch 2.5.1 logs no compilation metrics for that refusal, so this is how it shows."""
        with self._lock:
            refused = [cid for cid in self._pending_reasons if cid not in self._started]
            for cid in refused:
                texts = self._pending_reasons.pop(cid)
                name, file, line = self._frames.get(records.frame_id(cid) or "", (None, None, None))
                limit = _torch.recompile_limit()
                last = records.parse_failure(texts[0]).reason if texts else None
                self.cache_limit_hits.append(CacheLimitHit(function=name, file=file, line=line, limit=limit,
                                                           reason=last))
                self.eager_fallbacks.append(EagerFallback(function=name, file=file, line=line, compile_id=cid,
                                                          reason=f"recompile limit ({limit}) reached"))

    def _graph_break_mark(self) -> int | None:
        """Where torch's in-process graph-break list ends now, on a torch that logs no graph-break
        records (2.5.1); None where the structured log reports them."""
        try:
            return None if _torch.logs_graph_breaks() else _torch.graph_break_count()
        except TorchVersionError as exc:
            self._note(str(exc))
            return None

    def _on_listed_breaks(self, cid: str | None) -> None:
        """The breaks torch listed since this compile started belong to it (compiles of one thread
        do not interleave)."""
        if self._break_mark is None:
            return
        for reason, stack in _torch.graph_breaks_since(self._break_mark):
            if reason.startswith("DDPOptimizer intentional graph-break"):
                continue  # a DDP split (ddp_splits), not a break in the program's code
            self._add_graph_break(records.graph_break_from_stack(reason, stack, cid), cid)
        self._break_mark = _torch.graph_break_count()

    def _on_graph_break(self, cid: str | None, payload: str) -> None:
        gb = records.graph_break(payload, cid)
        if gb is not None:
            self._add_graph_break(gb, cid)

    def _add_graph_break(self, gb: GraphBreak, cid: str | None) -> None:
        key = gb.key()
        if (key, cid) in self._gb_cids:
            return  # the same break logged again by a restart of the same compile
        self._gb_cids.add((key, cid))
        seen = self._gb_seen.get(key)
        if seen is None:
            self._gb_seen[key] = gb
            self.graph_breaks.append(gb)
        else:
            seen.count += 1
            if cid and cid not in seen.compile_ids:
                seen.compile_ids.append(cid)

    def _on_metrics(self, row: dict[str, Any]) -> None:
        cid = str(row.get("compile_id"))
        if row.get("aotautograd_local_cache_hit_count") or row.get("aotautograd_remote_cache_hit_count"):
            self._aot_cache_hits.add(cid)
        fid = records.frame_id(cid) or ""
        if row.get("co_name") and row.get("co_filename"):
            self._frames[fid] = (row["co_name"], row["co_filename"], int(row.get("co_firstlineno") or 0))
        info = self._frames.get(fid)
        if info is not None:
            row = dict(row)
            if not row.get("co_name"):
                row["co_name"], row["co_filename"], row["co_firstlineno"] = info
        ct = records.compile_time(row)
        records.apply_phases(ct, self._phases.get(cid, {}))
        self._times_by_cid[cid] = ct
        graph = self._graphs.setdefault(cid, {})
        graph["op_count"] = row.get("graph_op_count")
        graph["node_count"] = row.get("graph_node_count")
        self.compile_times.append(ct)
        reasons = self._pending_reasons.pop(cid, None)
        rc = records.recompile(row, reasons)
        if rc is not None:
            if is_library_file(rc.file) and cid in self._callers:
                rc.call_file, rc.call_line = self._callers[cid]
            self.recompiles.append(rc)
        limit = _torch.recompile_limit()
        hit = records.cache_limit_hit(row, limit, info)
        if hit is not None:
            self.cache_limit_hits.append(hit)
        fb = records.eager_fallback(row, info, limit)
        if fb is not None:
            self.eager_fallbacks.append(fb)

    # -- queries ---------------------------------------------------------------------------------

    def _named_memory(self) -> list[GraphMemory]:
        """The memory accounts, their saved graph inputs named as the user's (x, fc2.weight)."""
        with self._lock:
            accounts = list(self.memory)
        for account in accounts:
            graph = self._graphs.get(str(account.compile_id)) or {}
            if account.part == 1 and "[ddp " not in (account.graph or ""):  # a DDP piece's inputs are its own
                graph_memory.name_inputs(account, _graph_inputs(graph.get("code")))
        unaccounted = sorted(self._aot_cache_hits - {str(a.compile_id) for a in accounts})
        if unaccounted:
            self._note(f"the graphs of compile {', '.join(unaccounted)} came from AOTAutograd's cache, not partitioned "
                       "again: what they save for the backward is not shown (TORCHINDUCTOR_AUTOGRAD_CACHE=0 shows it; "
                       "dynascope run keeps it beside the cache)")  # fmt: skip
        return accounts

    def graph_for(self, compile_id: str) -> dict[str, Any] | None:
        """{"code": FX source, "op_count", "node_count"} that Dynamo produced for a compile id."""
        return self._graphs.get(compile_id)

    def compiled_codes(self) -> list[types.CodeType]:
        """Original code objects of user functions compiled (resume functions left out), in order."""
        return [c for c in self._codes if not c.co_name.startswith("torch_dynamo_resume_in_")]

    def explanations(self, include_earlier: bool = True) -> list[Explanation]:
        """One Explanation per compiled user function that still has cache entries: every function
        seen compiling while observed, plus (include_earlier) those torch's metrics show compiled before."""
        codes = self.compiled_codes()
        if include_earlier:
            for code in _codes_from_metrics(self._metrics_before, codes):
                if code not in codes:
                    codes.append(code)
        out = []
        self.uncached = []
        for code in codes:
            expl = explain_code(code, globals_for_code(code), observer=self)
            if expl.cache_entries:
                out.append(expl)
            else:
                self.uncached.append(f"{getattr(code, 'co_qualname', code.co_name)} ({code.co_filename}:"
                                     f"{code.co_firstlineno})")
                for note in expl.notes:
                    self._note(note)
        return out

    def report(self, script: str | None = None, error: BaseException | None = None) -> Report:
        self._resolve_limit_hits()
        rep = Report(
            torch_version=_safe_version(), script=script, explanations=self.explanations(),
            graph_breaks=list(self.graph_breaks), recompiles=list(self.recompiles),
            compile_times=list(self.compile_times), cache_limit_hits=list(self.cache_limit_hits),
            eager_fallbacks=list(self.eager_fallbacks), notes=list(self.notes),
            error=None if error is None else f"{type(error).__name__}: {error}",
            ddp_splits=list(self.ddp_splits), memory=self._named_memory(),
        )
        rep.notes = list(self.notes)
        for expl in rep.explanations:
            for n in expl.notes:
                if n not in rep.notes:
                    rep.notes.append(n)
        for name in self.uncached:
            rep.notes.append(f"{name} was compiled but has no cache entries now (it fell back to eager, "
                             "or torch._dynamo.reset() cleared them)")
        return rep


def _graph_inputs(code: str | None) -> list[str]:
    """The parameter names of Dynamo's graph (its printed forward), in order; [] where it cannot be read."""
    if not code:
        return []
    try:
        tree = ast.parse(code.strip())
    except SyntaxError:
        return []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "forward":
            return [a.arg for a in node.args.args if a.arg != "self"]
    return []


def _safe_version() -> str | None:
    try:
        return _torch.torch_version()
    except DynascopeError:
        return None


def _codes_from_metrics(before: int | None = None, known: list[types.CodeType] | None = None) -> list[types.CodeType]:
    """Code objects of user functions torch's compilation metrics mention (the first `before` rows:
    those compiled before observation started), leaving out `known` ones."""
    try:
        rows = _torch.compilation_metrics()
    except TorchVersionError:
        return []
    if before is not None:
        rows = rows[:before]
    have = {(c.co_name, c.co_filename, c.co_firstlineno) for c in known or []}
    rows = [r for r in rows if (r.get("co_name"), r.get("co_filename"), r.get("co_firstlineno")) not in have]
    wanted = {(r.get("co_name"), r.get("co_filename"), r.get("co_firstlineno")) for r in rows
              if r.get("co_name") and not str(r.get("co_name")).startswith("torch_dynamo_resume_in_")}
    if not wanted:
        return []
    found: dict[tuple[Any, ...], types.CodeType] = {}
    files = {w[1] for w in wanted}
    for obj in gc.get_objects():
        if type(obj) is types.FunctionType:
            code = obj.__code__
            if code.co_filename in files:
                key = (code.co_name, code.co_filename, code.co_firstlineno)
                if key in wanted and key not in found:
                    found[key] = code
    order = [(r.get("co_name"), r.get("co_filename"), r.get("co_firstlineno")) for r in rows]
    seen: list[types.CodeType] = []
    for row_key in order:
        row_code = found.get(row_key)
        if row_code is not None and row_code not in seen:
            seen.append(row_code)
    return seen


@contextlib.contextmanager
def observe() -> Iterator[Observer]:
    """Observe every torch.compile in the block; the observer stays readable afterwards."""
    obs = Observer().start()
    try:
        yield obs
    finally:
        obs.stop()


def start_observing() -> Observer:
    """Always-on mode: start a process-wide observer (returns it). stop_observing() ends it."""
    if SESSION.active is not None:
        return SESSION.active
    return Observer().start()


def stop_observing() -> Observer | None:
    obs = SESSION.active
    if obs is not None:
        obs.stop()
    return obs


__all__ = ["Observer", "observe", "start_observing", "stop_observing"]
