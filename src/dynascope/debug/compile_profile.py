"""Where compile time goes, in the user's own code.

    with dynascope.compile_profile() as prof:
        compiled(x)
    print(prof.result.functions[0])        # the user function that cost most to trace
    prof.write_pstats("compile.prof")       # snakeviz compile.prof, python -m pstats compile.prof

Two sources, both cheap:

* Dynamo's tracing, per user function and source line. One hook on Dynamo's per-instruction step
  (through dynascope._torch): a step of a user frame is timed with perf_counter_ns and charged to the
  frame's code object and the line it traces; steps of torch (and stdlib) frames Dynamo inlines are not
  timed at all, so their time folds into the user line that called them. The time Dynamo spends after
  tracing a graph (OutputGraph.compile_subgraph: finishing the graph, AOTAutograd, the backend) is left
  out of the lines and shown per compiled frame instead. Self time of a line is its time minus the
  time of user lines it inlined.
* Phases per compiled frame: torch's own per-compile metrics (total, backend call, inductor, the
  tracing thrown away by restarts, FX-graph / AOTAutograd cache hits and misses, the lazy backward
  compile) read with the explain side's parsers (explain/torch_records.py), split further by two timers of
  ours (tracing per compile id, guard building). Graph breaks come from Dynamo's in-process list,
  recompile reasons from the metrics. No structured log is switched on: with a handler attached, torch
  builds every structured-log payload, which alone cost 3-7% of a compile here. (On torch 2.5.1, whose
  metrics carry no recompile reason, the compile observer runs alongside for them.)

torch 2.13 ships TORCH_COMPILE_DYNAMO_PROFILER, which times each inlined function from
InliningInstructionTranslator.inline_call. It prints to stdout from inside every frame's compile,
counts torch's own functions (Module._call_impl, ...) as functions of their own, and has no line
view; torch 2.5 and 2.8 lack it. The step hook gives the same per-function figures on every torch,
plus lines, so it is the one source here (tests check both rank a planted slow function first).
"""

from __future__ import annotations

import linecache
import os
import re
import sysconfig
import threading
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from dynascope import _torch
from dynascope.artifacts.compile_profile import (
    BreakCost,
    CompileProfile,
    FrameCost,
    FunctionCost,
    LineCost,
    RecompileCost,
)
from dynascope.errors import DynascopeError, TorchVersionError
from dynascope.explain import torch_records as records


class ProfileError(DynascopeError, RuntimeError):
    """Compile-profile misuse (two profiles at once, and the like)."""


# ------------------------------------------------------------------------------------------------
# The hook on Dynamo's tracing
# ------------------------------------------------------------------------------------------------


def _internal_dirs() -> tuple[str, ...]:
    dirs = {_torch.torch_package_dir(), os.path.dirname(os.path.abspath(__file__)).rsplit(os.sep, 1)[0]}
    for key in ("stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            dirs.add(os.path.abspath(path))
    return tuple(d + os.sep for d in dirs)


class _Recorder:
    """Times Dynamo's steps of user frames, and its guard building. Dynamo compiles under one lock, so
    one stack serves."""

    def __init__(self) -> None:
        self.internal = _internal_dirs()
        self.user: dict[types.CodeType, bool] = {}
        self.lines: dict[tuple[types.CodeType, int], list[int]] = {}  # -> [inclusive, self, steps]
        self.funcs: dict[types.CodeType, list[int]] = {}  # -> [inclusive, self, steps, traced]
        self.edges: dict[tuple[types.CodeType, types.CodeType], list[int]] = {}  # (caller, callee) -> [incl, self]
        self.active: dict[types.CodeType, int] = {}  # code -> steps of it open on the stack now
        self.stack: list[list[Any]] = []  # [code or None, child ns, calling user code or None]
        self.excluded = 0  # ns spent in compile_subgraph so far (left out of every open step)
        self.tracing: dict[str, int] = {}  # compile id -> ns of its root frame's steps (all of its tracing)
        self.guards: dict[str, int] = {}  # compile id -> ns building its guards

    def is_user(self, code: types.CodeType) -> bool:
        name = code.co_filename
        if name.startswith(("<frozen", *self.internal)):
            return False
        return not os.path.abspath(name).startswith(self.internal)

    def wrap_step(self, original: Callable[[Any], Any]) -> Callable[[Any], Any]:
        rec = self
        perf = time.perf_counter_ns
        user = self.user
        stack = self.stack
        active = self.active
        funcs = self.funcs

        def step(tx: Any) -> Any:
            code = tx.f_code
            mine = user.get(code)
            if mine is None:
                mine = user[code] = rec.is_user(code)
            if stack:
                if not mine:
                    return original(tx)  # torch internals: folded into the user step that led here
                top = stack[-1]
                caller = top[0] if top[0] is not None and top[0] is not code else top[2]
                entry: list[Any] = [code, 0, caller]
            else:
                entry = [code if mine else None, 0, None]
            if mine:
                f = funcs.get(code)
                if f is None:
                    f = funcs[code] = [0, 0, 0, 0]
                if tx.instruction_pointer == 0:
                    f[3] += 1
                active[code] = active.get(code, 0) + 1
            stack.append(entry)
            excluded = rec.excluded
            t0 = perf()
            try:
                return original(tx)
            finally:
                dt = perf() - t0 - (rec.excluded - excluded)
                stack.pop()
                if stack:
                    stack[-1][1] += dt
                else:
                    rec.charge_frame(dt)
                if mine:
                    active[code] -= 1
                    rec.charge(entry, tx.lineno, dt)

        return step

    def charge_frame(self, dt: int) -> None:
        cid = _current_compile_id() or "?"
        self.tracing[cid] = self.tracing.get(cid, 0) + dt

    def charge(self, entry: list[Any], lineno: Any, dt: int) -> None:
        code, child, caller = entry
        own = dt - child
        key = (code, int(lineno or 0))
        line = self.lines.get(key)
        if line is None:
            line = self.lines[key] = [0, 0, 0]
        line[0] += dt
        line[1] += own
        line[2] += 1
        f = self.funcs[code]
        if not self.active[code]:  # recursion: count the outermost activation only
            f[0] += dt
        f[1] += own
        f[2] += 1
        if caller is not None:
            edge = self.edges.get((caller, code))
            if edge is None:
                edge = self.edges[(caller, code)] = [0, 0]
            edge[0] += dt
            edge[1] += own

    def wrap_compile_subgraph(self, original: Callable[..., Any]) -> Callable[..., Any]:
        rec = self
        perf = time.perf_counter_ns

        def compile_subgraph(*args: Any, **kwargs: Any) -> Any:
            t0 = perf()
            try:
                return original(*args, **kwargs)
            finally:
                rec.excluded += perf() - t0

        return compile_subgraph

    def wrap_guards(self, original: Callable[..., Any]) -> Callable[..., Any]:
        rec = self
        perf = time.perf_counter_ns

        def build_guards(*args: Any, **kwargs: Any) -> Any:
            t0 = perf()
            try:
                return original(*args, **kwargs)
            finally:
                cid = _current_compile_id() or "?"
                rec.guards[cid] = rec.guards.get(cid, 0) + perf() - t0

        return build_guards


def _current_compile_id() -> str | None:
    try:
        return _torch.current_compile_id()
    except TorchVersionError:
        return None


# ------------------------------------------------------------------------------------------------
# The profiler: the hooks, torch's per-compile metrics, and the result built from both
# ------------------------------------------------------------------------------------------------

_LOCK = threading.Lock()
_RUNNING: list[CompileProfiler] = []


class CompileProfiler:
    """Profile every torch.compile between start() and stop(); `result` is the CompileProfile."""

    def __init__(self, script: str | None = None) -> None:
        self.script = script
        self.result: CompileProfile | None = None
        self._rec: _Recorder | None = None
        self._remove: Callable[[], None] | None = None
        self._notes: list[str] = []
        self._since: tuple[float, int, int | None] = (0.0, 0, None)
        self._obs: Any = None  # on torch whose metrics lack recompile reasons (2.5.1) only

    def start(self) -> CompileProfiler:
        _torch.require_torch()
        with _LOCK:
            if _RUNNING:
                raise ProfileError("a compile profile is running already; one at a time (stop it first)")
            _RUNNING.append(self)
        self._since = (time.time(), _metrics_count(), _break_count())
        self._rec = _Recorder()
        try:
            self._remove = _torch.hook_dynamo_tracing(self._rec.wrap_step, self._rec.wrap_compile_subgraph,
                                                      self._rec.wrap_guards)  # fmt: skip
        except TorchVersionError as exc:
            self._notes.append(f"{exc} (no per-function or per-line tracing times)")
            self._rec = None
        if not _torch.metrics_record_recompile_reasons():
            from dynascope.explain.observer import Observer

            self._obs = Observer().start()  # its structured log is where this torch says why it recompiled
        return self

    def stop(self, error: BaseException | None = None) -> CompileProfile:
        try:
            if self._remove is not None:
                self._remove()
                self._remove = None
            if self._obs is not None and self._obs.active:
                self._obs.stop()
        finally:
            with _LOCK:
                if self in _RUNNING:
                    _RUNNING.remove(self)
        observed = list(self._obs.recompiles) if self._obs is not None else []
        self.result = build_profile(self._rec, self._since, self.script, self._notes, error, observed)
        return self.result

    def __enter__(self) -> CompileProfiler:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def to_dict(self) -> dict[str, Any]:
        return self._done().to_dict()

    def write_pstats(self, path: str | os.PathLike[str]) -> str:
        return self._done().write_pstats(path)

    def _done(self) -> CompileProfile:
        if self.result is None:
            raise ProfileError("the compile profile is still running: read it after the `with` block")
        return self.result


@contextmanager
def compile_profile(script: str | None = None) -> Iterator[CompileProfiler]:
    """Profile every torch.compile in the block: `prof.result` (a CompileProfile), `prof.to_dict()`,
    `prof.write_pstats(path)` once the block ends."""
    prof = CompileProfiler(script).start()
    error: BaseException | None = None
    try:
        yield prof
    except BaseException as exc:
        error = exc
        raise
    finally:
        prof.stop(error)


def _metrics_count() -> int:
    try:
        return len(_torch.compilation_metrics())
    except TorchVersionError:
        return 0


def _break_count() -> int | None:
    try:
        return _torch.graph_break_count()
    except TorchVersionError:
        return None


def excerpt(file: str | None, line: int | None) -> str | None:
    """The source text of one line, stripped; None where the file cannot be read."""
    if not file or not line:
        return None
    return linecache.getline(file, line).strip() or None


def _name(code: types.CodeType) -> str:
    return str(getattr(code, "co_qualname", code.co_name))


def _s(ns: int) -> float:
    return round(ns / 1e9, 6)


def build_profile(rec: _Recorder | None, since: tuple[float, int, int | None], script: str | None,
                  notes: list[str], error: BaseException | None = None,
                  observed: list[Any] | None = None) -> CompileProfile:
    """The profile of what compiled since `since` (wall time, metrics rows, graph breaks at the start)."""
    prof = CompileProfile(torch_version=_torch.torch_version(), script=script, notes=list(notes),
                          error=None if error is None else f"{type(error).__name__}: {error}")
    if rec is not None:
        _tracing(prof, rec)
    rows = _new_rows(since[0], since[1])
    backward = [r for r in rows if r.get("is_forward") is False or (r.get("is_runtime") and not r.get("co_name"))]
    rows = [r for r in rows if not any(r is b for b in backward)]
    prof.frames = [_frame(row, rec) for row in rows]
    by_cid = {f.compile_id: f for f in prof.frames}
    for row in backward:  # torch compiles the backward graph lazily and logs it under the frame's compile id
        frame = by_cid.get(str(row.get("compile_id")))
        seconds = _num(row.get("inductor_compile_time_s"))
        if seconds is None and _num(row.get("duration_us")) is not None:
            seconds = row["duration_us"] / 1e6
        if frame is not None and seconds is not None:
            frame.backward_s = round((frame.backward_s or 0.0) + seconds, 6)
    prof.compile_s = round(sum((f.total_s or 0.0) + (f.backward_s or 0.0) for f in prof.frames), 6)
    prof.graph_breaks = _breaks(since[2], prof.frames)
    prof.recompiles = _recompiles(rows, prof.frames, list(rec.funcs) if rec is not None else [], observed or [])
    return prof


def _new_rows(start: float, count: int) -> list[dict[str, Any]]:
    """torch's compilation metrics rows of the compiles since the profile started (torch keeps the
    last 64 or so: rows are picked by start time where they carry one)."""
    try:
        rows = _torch.compilation_metrics()
    except TorchVersionError:
        return []
    timed = [r for r in rows if isinstance(r.get("start_time"), (int, float))]
    if timed:  # by start time: the count moves no more once torch's deque is full (a long process)
        return [r for r in timed if r["start_time"] >= start - 1e-3]
    return rows[count:]


def _user_names(rec: _Recorder) -> dict[types.CodeType, tuple[str, int]]:
    """Each traced code object's (name, def line). A resume function Dynamo made after a graph break
    (torch_dynamo_resume_in_<fn>_at_<line>) counts as the function it continues."""
    by_name = {(c.co_filename, c.co_name): c for c in rec.funcs if not _RESUME.match(c.co_name)}
    out = {}
    for code in rec.funcs:
        m = _RESUME.match(code.co_name)
        orig = by_name.get((code.co_filename, m.group("fn"))) if m else None
        if orig is not None:
            out[code] = (_name(orig), orig.co_firstlineno)
        elif m:
            qual = _name(code)
            out[code] = (qual[: len(qual) - len(code.co_name)] + m.group("fn"), code.co_firstlineno)
        else:
            out[code] = (_name(code), code.co_firstlineno)
    return out


def _tracing(prof: CompileProfile, rec: _Recorder) -> None:
    names = _user_names(rec)
    funcs: dict[tuple[str, str, int], list[int]] = {}
    for code, (incl, own, steps, traced) in rec.funcs.items():
        if steps:
            name, line = names[code]
            f = funcs.setdefault((code.co_filename, name, line), [0, 0, 0, 0])
            for i, v in enumerate((incl, own, steps, traced)):
                f[i] += v
    prof.functions = [FunctionCost(function=name, file=file, line=line, inclusive_s=_s(incl), self_s=_s(own),
                                   traced=traced, instructions=steps)
                      for (file, name, line), (incl, own, steps, traced) in funcs.items()]  # fmt: skip
    prof.functions.sort(key=lambda f: (-f.self_s, -f.inclusive_s))
    merged: dict[tuple[str, int], list[Any]] = {}
    for (code, line), (incl, own, steps) in rec.lines.items():
        key = (code.co_filename, line)
        m = merged.setdefault(key, [names[code][0], 0, 0, 0])
        m[1] += incl
        m[2] += own
        m[3] += steps
    prof.lines = [LineCost(function=fn, file=file, line=line, code=excerpt(file, line), inclusive_s=_s(incl),
                           self_s=_s(own), instructions=steps)
                  for (file, line), (fn, incl, own, steps) in merged.items()]  # fmt: skip
    prof.lines.sort(key=lambda ln: (-ln.self_s, -ln.inclusive_s))
    prof.tracing_s = _s(sum(v[1] for v in rec.funcs.values()))
    prof._pstats = _pstats(rec, names)


def _pstats(rec: _Recorder, names: dict[types.CodeType, tuple[str, int]]) -> dict[Any, Any]:
    """cProfile's stats dict: {(file, line, name): (primitive calls, calls, self s, inclusive s, callers)},
    callers {(file, line, name): (calls, calls, self s, inclusive s)}."""
    def key(code: types.CodeType) -> tuple[str, int, str]:
        name, line = names[code]
        return (code.co_filename, line, name)

    sums: dict[Any, list[Any]] = {}
    for code, (incl, own, steps, traced) in rec.funcs.items():
        if steps:
            s = sums.setdefault(key(code), [0, 0.0, 0.0, {}])
            s[0] += max(traced, 1)
            s[1] += own / 1e9
            s[2] += incl / 1e9
    for (caller, callee), (incl, own) in rec.edges.items():
        k, ck = key(callee), key(caller)
        if k in sums and ck in sums and k != ck:
            calls = sums[k][0]
            old = sums[k][3].get(ck, (calls, calls, 0.0, 0.0))
            sums[k][3][ck] = (calls, calls, old[2] + own / 1e9, old[3] + incl / 1e9)
    return {k: (n, n, tt, ct, callers) for k, (n, tt, ct, callers) in sums.items()}


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


_CACHE_COUNTS = {
    "fx_graph_hits": "inductor_fx_local_cache_hit_count", "fx_graph_misses": "inductor_fx_local_cache_miss_count",
    "fx_graph_remote_hits": "inductor_fx_remote_cache_hit_count",
    "aot_autograd_hits": "aotautograd_local_cache_hit_count",
    "aot_autograd_misses": "aotautograd_local_cache_miss_count",
    "aot_autograd_remote_hits": "aotautograd_remote_cache_hit_count",
}


def _frame(row: dict[str, Any], rec: _Recorder | None) -> FrameCost:
    """One compilation_metrics row, split with our own timers (tracing, guards)."""
    ct = records.compile_time(row)
    cache = {name: int(row[k]) for name, k in _CACHE_COUNTS.items() if isinstance(row.get(k), int) and row[k]}
    if not cache and row.get("fx_graph_cache_hit") is not None:  # torch 2.5.1 names them so
        cache = {"fx_graph_hits": int(bool(row.get("fx_graph_cache_hit")))}
    backend = _num(row.get("backend_compile_time_s"))
    inductor = _num(row.get("inductor_compile_time_s"))
    aot = None if backend is None or inductor is None else max(0.0, backend - inductor)
    tracing = guards = None
    if rec is not None:
        t, g = rec.tracing.get(ct.compile_id), rec.guards.get(ct.compile_id)
        tracing, guards = (None if t is None else _s(t)), (None if g is None else _s(g))
    return FrameCost(
        compile_id=ct.compile_id, function=ct.function, file=ct.file, line=ct.line, total_s=ct.total_s,
        dynamo_s=ct.dynamo_s, tracing_s=tracing, guards_s=guards,
        restart_s=_num(row.get("dynamo_time_before_restart_s")),
        backend_s=backend, aot_s=aot, inductor_s=inductor, cache=cache, status=ct.status,
    )


_RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<fn>.+)_at_(?P<line>\d+)$")
_FIRST_COMPILE = re.compile(r"/0(?:_\d+)?$")


def _breaks(mark: int | None, frames: list[FrameCost]) -> list[BreakCost]:
    """The graph breaks Dynamo listed since `mark`, one per line and reason, each charged with the
    first compile of the resume functions Dynamo made at its line (torch_dynamo_resume_in_<fn>_at_<line>,
    same file) and the tracing thrown away restarting the frame that broke."""
    if mark is None:
        return []
    try:
        listed = _torch.graph_breaks_since(mark)
    except TorchVersionError:
        return []
    seen: dict[tuple[Any, ...], Any] = {}
    for reason, stack in listed:
        gb = records.graph_break_from_stack(reason, _user_stack(stack), None)
        key = gb.key()
        if key in seen:
            seen[key].count += 1
        else:
            seen[key] = gb
    out = []
    for gb in seen.values():
        cost, cids = 0.0, []
        for f in frames:
            m = _RESUME.match(f.function or "")
            if gb.line is None or f.file != gb.file:
                continue
            if m and int(m.group("line")) == gb.line and _FIRST_COMPILE.search(f.compile_id):
                cost += (f.total_s or 0.0) + (f.backward_s or 0.0)  # its recompiles count as recompiles
                cids.append(f.compile_id)
            elif (f.function == gb.function or (m and m.group("fn") == gb.function)) and f.restart_s:
                cost += f.restart_s
                cids.insert(0, f.compile_id)
        out.append(BreakCost(reason=gb.reason, function=gb.function, file=gb.file, line=gb.line,
                             code=excerpt(gb.file, gb.line), count=gb.count, cost_s=round(cost, 6),
                             compile_ids=cids))  # fmt: skip
    out.sort(key=lambda b: -b.cost_s)
    return out


def _user_stack(stack: list[tuple[str, int, str]]) -> list[tuple[str, int, str]]:
    """The stack cut after its innermost user frame (a break inside torch code is the user line's)."""
    internal = _internal_dirs()
    keep = [i for i, (file, _, _) in enumerate(stack) if not os.path.abspath(file).startswith(internal)]
    return stack[: keep[-1] + 1] if keep else stack


_STACK_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')


def _recompiles(rows: list[dict[str, Any]], frames: list[FrameCost], codes: list[types.CodeType],
                observed: list[Any]) -> list[RecompileCost]:
    """Each recompile charged with its compile's total time, at the user line of the guard that failed
    (torch >= 2.13 gives it in the reason), else at the first line of the function that reads the
    guarded variable, else at the def line."""
    by_cid = {f.compile_id: f for f in frames}
    internal = _internal_dirs()
    out = []
    for row in rows:
        cid = str(row.get("compile_id"))
        if _FIRST_COMPILE.search(cid) or records.is_limit_refusal(row) or not re.search(r"/\d+", cid):
            continue  # a first compile, or torch refusing one at the recompile limit
        rc = records.recompile(row) or next((r for r in observed if r.compile_id == cid), None)
        reason = rc.reason if rc is not None else "recompiled (this torch records no reason without its structured log)"
        where, line_from = None, "def"
        text = str(row.get("recompile_reason") or "")
        users = [(m.group("file"), int(m.group("line"))) for m in _STACK_FRAME.finditer(text)
                 if not os.path.abspath(m.group("file")).startswith(internal)]  # fmt: skip
        if users:
            where, line_from = users[-1], "guard"
        failure = next((f for f in rc.failures if f.subject), None) if rc is not None else None
        if where is None and failure is not None and failure.subject:
            name, file = row.get("co_name"), row.get("co_filename")
            code = next((c for c in codes if c.co_name == name and c.co_filename == file), None)
            use = _first_use(code, failure.subject) if code is not None else None
            if code is not None and use is not None:
                where, line_from = (code.co_filename, use), "first use"
        file, line = where if where else (row.get("co_filename"), row.get("co_firstlineno"))
        m = _RESUME.match(str(row.get("co_name") or ""))
        frame = by_cid.get(cid)
        out.append(RecompileCost(function=m.group("fn") if m else row.get("co_name"), file=file, line=line,
                                 code=excerpt(file, line), compile_id=cid, reason=reason,
                                 cost_s=_frame_cost(frame),
                                 line_from=line_from))  # fmt: skip
    out.sort(key=lambda r: -r.cost_s)
    return out


def _frame_cost(frame: FrameCost | None) -> float:
    return 0.0 if frame is None else round((frame.total_s or 0.0) + (frame.backward_s or 0.0), 6)


def _first_use(code: types.CodeType, subject: str) -> int | None:
    """The first line of `code` that reads the variable a guard names (`scale`, `self.n`, `x.shape`)."""
    import dis

    name = re.split(r"[.\[(]", subject, maxsplit=1)[0]
    line = None
    for inst in dis.get_instructions(code):
        pos = getattr(inst, "positions", None)
        start = getattr(inst, "starts_line", None)  # an int before 3.13
        line = pos.lineno if pos is not None and pos.lineno else (start if type(start) is int else line)
        loads = inst.argval if isinstance(inst.argval, tuple) else (inst.argval,)  # LOAD_FAST_LOAD_FAST: 3.13
        reads = inst.opname.startswith(("LOAD_FAST", "LOAD_DEREF", "LOAD_GLOBAL", "LOAD_NAME")) and name in loads
        if reads and line is not None:
            return int(line)
    return None


__all__ = ["CompileProfile", "CompileProfiler", "ProfileError", "build_profile", "compile_profile"]
