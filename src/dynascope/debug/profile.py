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
* Phases per compiled frame: the compile observer (explain/observer.py), which reads torch's own
  timed events and compilation metrics: tracing, guard building, AOTAutograd, backend/inductor,
  the tracing thrown away by restarts, and the FX-graph / AOTAutograd cache hits and misses.

torch 2.13 ships TORCH_COMPILE_DYNAMO_PROFILER, which times each inlined function from
InliningInstructionTranslator.inline_call. It prints to stdout from inside every frame's compile,
counts torch's own functions (Module._call_impl, ...) as functions of their own, and has no line
view; torch 2.5 and 2.8 lack it. The step hook gives the same per-function figures on every torch,
plus lines, so it is the one source here (tests check both rank a planted slow function first).
"""

from __future__ import annotations

import linecache
import marshal
import os
import re
import sysconfig
import threading
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from .. import _torch
from ..errors import DynascopeError, TorchVersionError

SCHEMA = "dynascope.compile_profile/1"
PROFILE_FILE = "compile_profile.json"


class ProfileError(DynascopeError, RuntimeError):
    """Compile-profile misuse (two profiles at once, and the like)."""


# ------------------------------------------------------------------------------------------------
# The result, as plain data (docs/debug.md documents the JSON)
# ------------------------------------------------------------------------------------------------


@dataclass
class FunctionCost:
    function: str
    file: str
    line: int  # the def line
    inclusive_s: float  # tracing this function and everything it called
    self_s: float  # less the user functions it called (torch internals it called stay in)
    traced: int  # how many times Dynamo started tracing it (inlined calls, restarts, recompiles)
    instructions: int  # bytecode instructions Dynamo traced in it


@dataclass
class LineCost:
    function: str
    file: str
    line: int
    code: str | None
    inclusive_s: float
    self_s: float
    instructions: int


@dataclass
class FrameCost:
    """One compile of one frame (a compile id), split into phases. None: torch logged no such phase."""

    compile_id: str
    function: str | None
    file: str | None
    line: int | None
    total_s: float | None
    dynamo_s: float | None  # all of Dynamo: tracing, guards, bytecode generation
    tracing_s: float | None  # Dynamo's bytecode tracing (torch's bytecode_tracing event)
    guards_s: float | None  # building the guards
    restart_s: float | None  # tracing thrown away when Dynamo restarted the frame (graph breaks)
    aot_s: float | None  # AOTAutograd
    backend_s: float | None  # the backend (inductor code generation included)
    inductor_s: float | None
    cache: dict[str, int] = field(default_factory=dict)  # fx_graph / aot_autograd cache hits and misses
    status: str = "ok"


@dataclass
class BreakCost:
    """A graph break, charged to its line. cost_s: the compile time of the code after the break,
    compiled as frames of their own (resume functions), plus the tracing Dynamo threw away restarting."""

    reason: str
    function: str | None
    file: str | None
    line: int | None
    code: str | None
    count: int
    cost_s: float
    compile_ids: list[str] = field(default_factory=list)


@dataclass
class RecompileCost:
    """A recompile, charged to the line that introduced the guard that failed; cost_s: its compile."""

    function: str | None
    file: str | None
    line: int | None
    code: str | None
    compile_id: str | None
    reason: str
    cost_s: float
    line_from: str  # "guard": the guard's user line (torch >= 2.13); "first use": the first line that reads
    # the guarded variable (older torch, whose guards carry no line); "def": the function's first line


@dataclass
class CompileProfile:
    schema: str = SCHEMA
    torch_version: str | None = None
    script: str | None = None
    compile_s: float = 0.0  # all compiles' total time
    tracing_s: float = 0.0  # Dynamo's tracing of user lines (what the functions and lines add up to)
    functions: list[FunctionCost] = field(default_factory=list)  # ranked by self_s
    lines: list[LineCost] = field(default_factory=list)  # ranked by self_s
    frames: list[FrameCost] = field(default_factory=list)  # in compile order
    graph_breaks: list[BreakCost] = field(default_factory=list)  # ranked by cost_s
    recompiles: list[RecompileCost] = field(default_factory=list)  # ranked by cost_s
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    _pstats: dict[Any, Any] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("_pstats", None)
        return out

    def write_pstats(self, path: str | os.PathLike[str]) -> str:
        """Write the per-function profile in cProfile's format: `python -m pstats FILE`, snakeviz FILE."""
        with open(path, "wb") as fh:
            marshal.dump(self._pstats, fh)
        return os.fspath(path)


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
    """Times Dynamo's steps of user frames. Dynamo compiles under one lock, so one stack serves."""

    def __init__(self) -> None:
        self.internal = _internal_dirs()
        self.user: dict[types.CodeType, bool] = {}
        self.lines: dict[tuple[types.CodeType, int], list[int]] = {}  # -> [inclusive, self, steps]
        self.funcs: dict[types.CodeType, list[int]] = {}  # -> [inclusive, self, steps, traced]
        self.edges: dict[tuple[types.CodeType, types.CodeType], list[int]] = {}  # (caller, callee) -> [incl, self, n]
        self.active: dict[types.CodeType, int] = {}  # code -> steps of it open on the stack now
        self.stack: list[list[Any]] = []  # [code, child_ns]
        self.excluded = 0  # ns spent in compile_subgraph so far (left out of every open step)
        self.outside_ns = 0  # steps of torch frames Dynamo compiled at the top (no user frame open)

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

        def step(tx: Any) -> Any:
            code = tx.f_code
            mine = user.get(code)
            if mine is None:
                mine = user[code] = rec.is_user(code)
            if not mine:
                if stack:
                    return original(tx)  # folded into the user step that led here
                entry: list[Any] = [None, 0]
            else:
                entry = [code, 0]
                f = rec.funcs.get(code)
                if f is None:
                    f = rec.funcs[code] = [0, 0, 0, 0]
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
                if code in active and entry[0] is not None:
                    active[code] -= 1
                if stack:
                    stack[-1][1] += dt
                rec.charge(entry, tx, dt)

        return step

    def charge(self, entry: list[Any], tx: Any, dt: int) -> None:
        code, child = entry
        own = dt - child
        if code is None:
            self.outside_ns += own
            return
        key = (code, int(getattr(tx, "lineno", 0) or 0))
        line = self.lines.get(key)
        if line is None:
            line = self.lines[key] = [0, 0, 0]
        line[0] += dt
        line[1] += own
        line[2] += 1
        f = self.funcs[code]
        if not self.active.get(code):  # recursion: count the outermost activation only
            f[0] += dt
        f[1] += own
        f[2] += 1
        caller = next((e[0] for e in reversed(self.stack) if e[0] is not None and e[0] is not code), None)
        if caller is not None:
            edge = self.edges.get((caller, code))
            if edge is None:
                edge = self.edges[(caller, code)] = [0, 0, 0]
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


# ------------------------------------------------------------------------------------------------
# The profiler: hook + observer, and the result built from both
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
        self._obs: Any = None
        self._notes: list[str] = []

    def start(self) -> CompileProfiler:
        from ..explain.observer import Observer

        _torch.require_torch()
        with _LOCK:
            if _RUNNING:
                raise ProfileError("a compile profile is running already; one at a time (stop it first)")
            _RUNNING.append(self)
        self._rec = _Recorder()
        try:
            self._remove = _torch.hook_dynamo_tracing(self._rec.wrap_step, self._rec.wrap_compile_subgraph)
        except TorchVersionError as exc:
            self._notes.append(f"{exc} (no per-function or per-line tracing times)")
        self._obs = Observer().start()
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
        self.result = build_profile(self._rec, self._obs, self.script, self._notes, error)
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


def excerpt(file: str | None, line: int | None) -> str | None:
    """The source text of one line, stripped; None where the file cannot be read."""
    if not file or not line:
        return None
    return linecache.getline(file, line).strip() or None


def _name(code: types.CodeType) -> str:
    return str(getattr(code, "co_qualname", code.co_name))


def _s(ns: int) -> float:
    return round(ns / 1e9, 6)


def build_profile(rec: _Recorder | None, obs: Any, script: str | None, notes: list[str],
                  error: BaseException | None = None) -> CompileProfile:
    prof = CompileProfile(torch_version=_torch.torch_version(), script=script, notes=list(notes),
                          error=None if error is None else f"{type(error).__name__}: {error}")
    if rec is not None:
        _tracing(prof, rec)
    if obs is not None:
        rows = _metrics_by_cid()
        prof.frames = [_frame(ct, obs.phase_durations(ct.compile_id), rows.get(ct.compile_id, {}))
                       for ct in obs.compile_times]
        prof.compile_s = round(sum(f.total_s or 0.0 for f in prof.frames), 6)
        prof.graph_breaks = _breaks(obs.graph_breaks, prof.frames)
        codes = list(rec.funcs) if rec is not None else []
        prof.recompiles = _recompiles(obs, prof.frames, codes) if obs.recompiles else []
        for note in obs.notes:
            if note not in prof.notes:
                prof.notes.append(note)
    return prof


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
    for (caller, callee), (incl, own, _n) in rec.edges.items():
        k, ck = key(callee), key(caller)
        if k in sums and ck in sums and k != ck:
            calls = sums[k][0]
            old = sums[k][3].get(ck, (calls, calls, 0.0, 0.0))
            sums[k][3][ck] = (calls, calls, old[2] + own / 1e9, old[3] + incl / 1e9)
    return {k: (n, n, tt, ct, callers) for k, (n, tt, ct, callers) in sums.items()}


def _metrics_by_cid() -> dict[str, dict[str, Any]]:
    try:
        rows = _torch.compilation_metrics()
    except TorchVersionError:
        return {}
    return {str(r.get("compile_id")): r for r in rows}


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


_CACHE_COUNTS = {
    "fx_graph_hits": "inductor_fx_local_cache_hit_count", "fx_graph_misses": "inductor_fx_local_cache_miss_count",
    "fx_graph_remote_hits": "inductor_fx_remote_cache_hit_count",
    "aot_autograd_hits": "aotautograd_local_cache_hit_count",
    "aot_autograd_misses": "aotautograd_local_cache_miss_count",
    "aot_autograd_remote_hits": "aotautograd_remote_cache_hit_count",
}


def _frame(ct: Any, phases: dict[str, float], row: dict[str, Any]) -> FrameCost:
    cache = {name: int(row[k]) for name, k in _CACHE_COUNTS.items() if isinstance(row.get(k), int) and row[k]}
    if not cache and row.get("fx_graph_cache_hit") is not None:  # torch 2.5.1 names them so
        cache = {"fx_graph_hits": int(bool(row.get("fx_graph_cache_hit")))}
    restart = _num(row.get("dynamo_time_before_restart_s"))
    return FrameCost(
        compile_id=ct.compile_id, function=ct.function, file=ct.file, line=ct.line, total_s=ct.total_s,
        dynamo_s=ct.dynamo_s, tracing_s=phases.get("bytecode_tracing"), guards_s=phases.get("build_guards"),
        restart_s=restart, aot_s=ct.aot_s, backend_s=ct.backend_s, inductor_s=ct.inductor_s, cache=cache,
        status=ct.status,
    )


_RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<fn>.+)_at_(?P<line>\d+)$")
_FIRST_COMPILE = re.compile(r"/0(?:_\d+)?$")


def _breaks(graph_breaks: list[Any], frames: list[FrameCost]) -> list[BreakCost]:
    """Each break charged with the compiles of the resume functions Dynamo made at its line (named
    torch_dynamo_resume_in_<fn>_at_<line>, in the same file) and the restart time of its compiles."""
    by_cid = {f.compile_id: f for f in frames}
    out = []
    for gb in graph_breaks:
        cost = 0.0
        cids = list(gb.compile_ids)
        for f in frames:
            m = _RESUME.match(f.function or "")
            if (m and gb.line is not None and int(m.group("line")) == gb.line and f.file == gb.file
                    and _FIRST_COMPILE.search(f.compile_id)):  # its recompiles count as recompiles
                cost += f.total_s or 0.0
                if f.compile_id not in cids:
                    cids.append(f.compile_id)
        for cid in gb.compile_ids:
            frame = by_cid.get(cid)
            if frame is not None and frame.restart_s:
                cost += frame.restart_s
        out.append(BreakCost(reason=gb.reason, function=gb.function, file=gb.file, line=gb.line,
                             code=excerpt(gb.file, gb.line),
                             count=gb.count, cost_s=round(cost, 6), compile_ids=cids))  # fmt: skip
    out.sort(key=lambda b: -b.cost_s)
    return out


def _recompiles(obs: Any, frames: list[FrameCost], codes: list[types.CodeType]) -> list[RecompileCost]:
    """Each recompile charged with its compile's total time, at the user line of the guard that failed
    (from the function's cache entries, as `dynascope explain` shows them), else at the first line of
    the function that reads the guarded variable, else at the def line."""
    by_cid = {f.compile_id: f for f in frames}
    guard_lines = _guard_lines(obs)
    out = []
    for rc in obs.recompiles:
        frame = by_cid.get(rc.compile_id or "")
        failure = next((f for f in rc.failures if f.subject), None)
        where = None
        if failure is not None and failure.subject:
            where = (guard_lines.get((failure.compile_id, failure.subject))
                     or guard_lines.get((rc.file, failure.subject)))
        line_from = "guard" if where else "def"
        if where is None and failure is not None and failure.subject:
            code = next((c for c in codes if c.co_name == rc.function and c.co_filename == rc.file), None)
            use = _first_use(code, failure.subject) if code is not None else None
            if use is not None:
                where, line_from = (code.co_filename, use), "first use"  # type: ignore[union-attr]
        file, line = where if where else (rc.file, rc.line)
        m = _RESUME.match(rc.function or "")
        out.append(RecompileCost(function=m.group("fn") if m else rc.function, file=file, line=line,
                                 code=excerpt(file, line),
                                 compile_id=rc.compile_id, reason=rc.reason,
                                 cost_s=round((frame.total_s if frame else None) or 0.0, 6),
                                 line_from=line_from))  # fmt: skip
    out.sort(key=lambda r: -r.cost_s)
    return out


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


def _guard_lines(obs: Any) -> dict[tuple[str | None, str], tuple[str, int]]:
    """(compile id of the cache entry, guarded variable) -> the user line that introduced the guard;
    also (file, variable) for a failure that names no entry."""
    out: dict[tuple[str | None, str], tuple[str, int]] = {}
    try:
        explanations = obs.explanations(include_earlier=False)
    except Exception:  # noqa: BLE001 - lines are a bonus; the def line stands in
        return out
    for expl in explanations:
        for entry in expl.all_entries():
            for group in entry.guards:
                ul = group.user_line()
                if ul is not None and ul.file and ul.line and os.path.isabs(ul.file):
                    out.setdefault((entry.compile_id, group.subject), (ul.file, ul.line))
                    out.setdefault((ul.file, group.subject), (ul.file, ul.line))
    return out


__all__ = ["CompileProfile", "CompileProfiler", "ProfileError", "build_profile", "compile_profile"]
