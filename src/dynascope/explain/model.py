"""The Explanation: what Dynamo did to one function, as plain data.

Dataclasses only (no torch): an Explanation can be loaded from explanation.json and printed on a
machine without torch. The JSON layout is documented in docs/explain-format.md; `to_dict()` produces
exactly that layout and `from_dict()` reads it back.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import textwrap
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dynascope.userframes import library_text

SCHEMA = "dynascope.explanation/1"
HEADING, NOTE, RESUME = "heading", "note", "resume"  # roles of report lines (Lines); dynascope.console styles them
RESUME_MARKER = "  <== resume in this line"  # ends the source line a resume function starts at


class _Data:
    """to_dict/from_dict for the dataclasses below. `_nested` maps a field to the class of its
    value (or of each element, for a list)."""

    _nested: ClassVar[dict[str, type]] = {}

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            out[f.name] = _to_plain(value)
        return out

    @classmethod
    def from_dict(cls, data: Any) -> Any:
        """Read what to_dict wrote. Lenient, as a reader of files from other versions (or hands) must be:
        unknown keys are ignored; a nested value or list item of the wrong shape is dropped and its field
        keeps its default; a field that is missing and has no default is None."""
        data = data if isinstance(data, dict) else {}
        kwargs: dict[str, Any] = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            value = data.get(f.name, _ABSENT)
            sub = cls._nested.get(f.name)
            if sub is not None and value is not _ABSENT:
                value = _read_nested(sub, value, has_default, f.default_factory is list)
            if value is not _ABSENT:
                kwargs[f.name] = value
            elif not has_default:
                kwargs[f.name] = None
        return cls(**kwargs)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)


_ABSENT = object()


def _read_nested(sub: Any, value: Any, has_default: bool, is_list: bool) -> Any:
    """A nested field's value read with `sub.from_dict`: a list keeps its dict items, a dict is read,
    None stays None (an empty list for a list field); anything else is _ABSENT (the field's default),
    or `sub` read from nothing."""
    if isinstance(value, list):
        return [sub.from_dict(v) for v in value if isinstance(v, dict)]
    if isinstance(value, dict) and not is_list:
        return sub.from_dict(value)
    if value is None and not is_list:
        return None
    return _ABSENT if has_default else sub.from_dict({})


def _to_plain(value: Any) -> Any:
    if isinstance(value, _Data):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_to_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _to_plain(v) for k, v in value.items()}
    return value


@dataclass
class FunctionRef(_Data):
    name: str
    qualname: str | None = None
    file: str | None = None
    line: int | None = None

    def where(self) -> str:
        if self.file and self.line:
            return f"{self.file}:{self.line}"
        return self.file or "<unknown file>"


@dataclass
class UserLine(_Data):
    file: str | None
    line: int | None
    code: str | None
    # where torch named a library's line (torch.nn's, an installed package's), that line: `file`/`line`/`code`
    # are then the first user frame that led there (userframes.py), unless library frames were asked for
    library_file: str | None = None
    library_line: int | None = None
    library_code: str | None = None


@dataclass
class Guard(_Data):
    kind: str
    text: str
    raw: str
    user_line: UserLine | None = None
    fail_count: int | None = None
    _nested: ClassVar[dict[str, type]] = {"user_line": UserLine}


@dataclass
class GuardGroup(_Data):
    subject: str
    source: str | None
    guards: list[Guard] = field(default_factory=list)
    _nested: ClassVar[dict[str, type]] = {"guards": Guard}

    def user_line(self) -> UserLine | None:
        """The user line that introduced this group's guards: the first one in the function's own
        file (torch gives those as absolute paths), else the first known."""
        lines = [g.user_line for g in self.guards if g.user_line is not None]
        for ul in lines:
            if ul.file and os.path.isabs(ul.file):
                return ul
        return lines[0] if lines else None


@dataclass
class CodeView(_Data):
    name: str
    source: str
    decompiled: bool


@dataclass
class Subgraph(_Data):
    name: str
    global_name: str
    fx_code: str | None = None
    op_count: int | None = None
    node_count: int | None = None


@dataclass
class ResumeFunction(_Data):
    name: str
    code_name: str
    offset: int | None
    line: int | None
    source: str | None
    explanation: Explanation | None = None
    continues_at: UserLine | None = None  # first user line the resume function runs
    _nested: ClassVar[dict[str, type]] = {}  # filled below (forward reference)


@dataclass
class CacheEntry(_Data):
    index: int
    compile_id: str
    backend: str | None
    guard_count: int
    guards: list[GuardGroup] = field(default_factory=list)
    code: CodeView | None = None
    subgraphs: list[Subgraph] = field(default_factory=list)
    resume_functions: list[ResumeFunction] = field(default_factory=list)
    _nested: ClassVar[dict[str, type]] = {
        "guards": GuardGroup, "code": CodeView, "subgraphs": Subgraph, "resume_functions": ResumeFunction,
    }


@dataclass
class GraphBreak(_Data):
    reason: str
    detail: str | None
    function: str | None
    file: str | None
    line: int | None
    excerpt: str | None
    count: int = 1
    compile_ids: list[str] = field(default_factory=list)
    # "path:line" of the library line the break happened in, where it is charged to the user line that led there
    library: str | None = None

    def key(self) -> tuple[Any, ...]:
        return (self.reason, self.file, self.line)


@dataclass
class RecompileFailure(_Data):
    compile_id: str | None
    reason: str
    subject: str | None = None
    expected: str | None = None
    actual: str | None = None


@dataclass
class Recompile(_Data):
    function: str | None
    file: str | None
    line: int | None
    compile_id: str | None
    reason: str
    failures: list[RecompileFailure] = field(default_factory=list)
    # where the recompiled function is a library's own (torch.nn.Sequential.forward, torch's wrapper of a
    # compiled module): the first user frame of the stack that called it, the line a recompile is charged to
    call_file: str | None = None
    call_line: int | None = None
    _nested: ClassVar[dict[str, type]] = {"failures": RecompileFailure}


@dataclass
class CompileTime(_Data):
    compile_id: str
    function: str | None
    file: str | None = None
    line: int | None = None
    total_s: float | None = None
    dynamo_s: float | None = None
    aot_s: float | None = None
    backend_s: float | None = None
    inductor_s: float | None = None
    graph_op_count: int | None = None
    # a backward graph AOT autograd compiled lazily, at the first backward() (torch's entire_backward_compile):
    # part of total_s, outside dynamo_s/aot_s/backend_s
    backward_s: float | None = None
    # where total_s is the wall clock a trace of the same run measured (with_wall_times): torch's own figure
    timers_s: float | None = None
    guard_count: int | None = None
    status: str = "ok"
    fail_type: str | None = None
    fail_reason: str | None = None


@dataclass
class CacheLimitHit(_Data):
    function: str | None
    file: str | None
    line: int | None
    limit: int | None
    reason: str | None


@dataclass
class EagerFallback(_Data):
    function: str | None
    file: str | None
    line: int | None
    compile_id: str | None
    reason: str | None


@dataclass
class DdpBucket(_Data):
    """One piece of a graph DDPOptimizer split at DDP's gradient buckets: its graph and its bucket."""

    piece: int  # 1.. in forward order: the trace's graph "__compiled_fn_1[ddp 2/4]"
    bucket: int  # as DDP numbers its buckets (0: the last layers, whose gradients are ready first)
    params: int
    bytes: int
    layers: str  # "first..last" parameter in forward order


@dataclass
class DdpSplit(_Data):
    """A graph that DDPOptimizer split at DDP's bucket boundaries (torch._dynamo.config.optimize_ddp, on by
    default for a module run inside DistributedDataParallel): one graph per bucket, compiled one by one,
    so that each bucket's all-reduce can start while backward goes on. Not a graph break of the user's."""

    compile_id: str | None
    graph: str | None  # Dynamo's name of the graph before the split ("__compiled_fn_1")
    function: str | None
    file: str | None
    line: int | None
    graphs: int
    cap_bytes: int | None
    first_cap_bytes: int | None = None
    buckets: list[DdpBucket] = field(default_factory=list)
    _nested: ClassVar[dict[str, type]] = {"buckets": DdpBucket}

    @property
    def cap_mb(self) -> float | None:
        return None if self.cap_bytes is None else self.cap_bytes / 2**20

    def headline(self) -> str:
        """'DDP split the graph at 3 bucket boundaries (bucket_cap_mb=1): 4 graphs instead of 1'."""
        cap = f" (bucket_cap_mb={_mb(self.cap_mb)})" if self.cap_mb is not None else ""
        return (f"DDP split the graph at {_plural(self.graphs - 1, 'bucket boundary', 'bucket boundaries')}{cap}: "
                f"{self.graphs} graphs instead of 1")


DDP_KNOBS = (
    "DDP(model, bucket_cap_mb=N) sets the pieces: a bigger cap gives fewer graphs (more fusion, fewer launches) "
    "and all-reduces that start later in backward; torch._dynamo.config.optimize_ddp = False compiles one graph "
    "(no split, but every all-reduce waits for the whole backward: no overlap); optimize_ddp = \"python_reducer\" "
    "with compiled autograd (torch._dynamo.config.compiled_autograd = True) traces DDP's all-reduces into the "
    "compiled backward: one graph, with overlap (experimental)"
)


def _mb(value: float | None) -> str:
    return "?" if value is None else f"{value:g}" if value >= 0.01 else f"{value:.3g}"


def ddp_split_lines(splits: list[DdpSplit], costs: dict[str, str] | None = None) -> Lines:
    """The DDP splits of a run: each split graph's headline, its pieces' buckets, what it cost where a
    trace of the run measured it (`costs` by compile id) and the knobs."""
    out = Lines()
    if not splits:
        return out
    out.heading(f"DDP splits ({_plural(len(splits), 'graph')} split at DDP's buckets by DDPOptimizer; "
                "not graph breaks in your code):")
    for split in splits:
        where = f" ({os.path.basename(split.file)}:{split.line})" if split.file and split.line else ""
        out.add(f"  - {split.headline()}")
        out.add(f"      {split.function or '?'}{where}, compile {split.compile_id or '?'}: "
                f"graphs {split.graph or '?'}[ddp 1/{split.graphs}] .. [ddp {split.graphs}/{split.graphs}]")
        for b in split.buckets:
            out.add(f"      [ddp {b.piece}/{split.graphs}] bucket {b.bucket}: {_plural(b.params, 'parameter')}, "
                    f"{b.bytes / 2**20:.2f} MB, {b.layers}")
        cost = (costs or {}).get(str(split.compile_id))
        if cost:
            out.add(f"      run time: {cost}", NOTE)
    out.add(f"      knobs: {DDP_KNOBS}")
    return out


@dataclass
class Explanation(_Data):
    function: FunctionRef
    source: str | None = None
    kind: str = "function"
    cache_entries: list[CacheEntry] = field(default_factory=list)
    graph_breaks: list[GraphBreak] = field(default_factory=list)
    recompiles: list[Recompile] = field(default_factory=list)
    compile_times: list[CompileTime] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    _nested: ClassVar[dict[str, type]] = {
        "function": FunctionRef, "cache_entries": CacheEntry, "graph_breaks": GraphBreak,
        "recompiles": Recompile, "compile_times": CompileTime,
    }

    @classmethod
    def from_json(cls, text: str) -> Explanation:
        return cls.from_dict(json.loads(text))

    def __str__(self) -> str:
        return render_text(self)

    # convenience for tests and users
    def all_entries(self) -> list[CacheEntry]:
        """Every cache entry, resume functions' entries included (depth first)."""
        out: list[CacheEntry] = []
        for entry in self.cache_entries:
            out.append(entry)
            for rf in entry.resume_functions:
                if rf.explanation is not None:
                    out.extend(rf.explanation.all_entries())
        return out


ResumeFunction._nested = {"explanation": Explanation, "continues_at": UserLine}


@dataclass
class Report(_Data):
    """What `dynascope explain --out DIR` writes to DIR/explanation.json."""

    schema: str = SCHEMA
    torch_version: str | None = None
    python_version: str = field(default_factory=lambda: sys.version.split()[0])
    script: str | None = None
    explanations: list[Explanation] = field(default_factory=list)
    graph_breaks: list[GraphBreak] = field(default_factory=list)
    recompiles: list[Recompile] = field(default_factory=list)
    compile_times: list[CompileTime] = field(default_factory=list)
    cache_limit_hits: list[CacheLimitHit] = field(default_factory=list)
    eager_fallbacks: list[EagerFallback] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    # graphs DDPOptimizer split at DDP's buckets (not graph breaks: graph_breaks leaves them out)
    ddp_splits: list[DdpSplit] = field(default_factory=list)
    _nested: ClassVar[dict[str, type]] = {
        "explanations": Explanation, "graph_breaks": GraphBreak, "recompiles": Recompile,
        "compile_times": CompileTime, "cache_limit_hits": CacheLimitHit, "eager_fallbacks": EagerFallback,
        "ddp_splits": DdpSplit,
    }

    @classmethod
    def from_json(cls, text: str) -> Report:
        return cls.from_dict(json.loads(text))

    def __str__(self) -> str:
        parts = [render_text(e) for e in self.explanations]
        parts.append(render_observations(self))
        return "\n\n".join(p for p in parts if p.strip())


# ------------------------------------------------------------------------------------------------
# Plain-text rendering (the terminal command adds colour on top of this)
# ------------------------------------------------------------------------------------------------


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else (plural or word + 's')}"


def _indent(text: str, prefix: str) -> str:
    return textwrap.indent(text.rstrip("\n"), prefix, lambda line: True)


def render_guards(entry: CacheEntry, user_file: str | None = None, limit: int | None = None) -> str:
    """Guards as text, one check per line under a `# variable` heading. `limit` caps the checks
    shown per variable (the rest are counted)."""
    lines = []
    for group in entry.guards:
        ul = group.user_line()
        head = f"# {group.subject}"
        if ul is not None and ul.line:
            where = f"line {ul.line}" if not ul.file or ul.file == user_file else f"{ul.file}:{ul.line}"
            via = f", via {library_text(ul.library_file, ul.library_line)}" if ul.library_file else ""
            head += f"  (guarded since {where}: {ul.code}{via})" if ul.code else f"  ({where}{via})"
        lines.append(head)
        shown = group.guards if limit is None else group.guards[:limit]
        for g in shown:
            lines.append(g.text)
        if len(shown) < len(group.guards):
            lines.append(f"... and {len(group.guards) - len(shown)} more checks on {group.subject}")
    return "\n".join(lines)


class Lines:
    """A report's lines, each with its role: HEADING, NOTE, RESUME (the line a resume function starts
    at) or None for plain text. A terminal styles lines by role (dynascope.console.print_lines);
    text() is the plain report."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str | None]] = []

    def add(self, text: str = "", role: str | None = None) -> None:
        self.rows.extend((line, role) for line in text.split("\n"))

    def heading(self, text: str) -> None:
        self.add(text, HEADING)

    def note(self, text: str) -> None:
        self.add(f"note: {text}", NOTE)

    def block(self, text: str, prefix: str) -> None:
        """Plain text (source, code, guards) indented by `prefix`; the resume marker's line is RESUME."""
        for line in _indent(text, prefix).split("\n"):
            self.rows.append((line, RESUME if RESUME_MARKER.strip() in line else None))

    def nest(self, inner: Lines, prefix: str) -> None:
        """Another report's lines under this one, each prefixed, roles kept (trailing blank lines dropped)."""
        rows = list(inner.rows)
        while rows and not rows[-1][0]:
            rows.pop()
        self.rows.extend((prefix + text, role) for text, role in rows)

    def extend(self, other: Lines) -> None:
        self.rows.extend(other.rows)

    def __bool__(self) -> bool:
        return bool(self.rows)

    def text(self) -> str:
        return "\n".join(text for text, _ in self.rows)


def render_text(expl: Explanation, depth: int = 0, guard_limit: int | None = None) -> str:
    return explanation_lines(expl, depth, guard_limit).text()


def explanation_lines(expl: Explanation, depth: int = 0, guard_limit: int | None = None) -> Lines:
    """The report on one function, line by line with roles (render_text is its plain text)."""
    out = Lines()
    n = len(expl.cache_entries)
    fn = expl.function
    entries = _plural(n, "cache entry", "cache entries")
    if expl.kind == "resume":
        out.heading(f"This resume function is optimized by Dynamo. It has {entries}.")
    else:
        out.heading(f"This function is optimized by Dynamo. It has {entries}.")
        out.add(f"Function {fn.qualname or fn.name} in {fn.where()}")
    for note in expl.notes:
        out.note(note)
    for entry in expl.cache_entries:
        _entry_lines(entry, fn.file, depth, guard_limit, out)
    if depth == 0:
        obs = observation_lines(expl)
        if obs:
            out.add("")
            out.extend(obs)
    return out


def _entry_lines(entry: CacheEntry, user_file: str | None, depth: int, guard_limit: int | None, out: Lines) -> None:
    out.add("")
    backend = f", backend {entry.backend}" if entry.backend else ""
    out.heading(f"Cache entry {entry.index} (compile id {entry.compile_id}{backend}):")
    out.add("")
    out.heading(f"  Guards ({_plural(entry.guard_count, 'check')}; this entry runs only if all pass):")
    out.block(render_guards(entry, user_file, guard_limit) or "(no guards)", "    ")
    if entry.code is not None:
        out.add("")
        how = "decompiled" if entry.code.decompiled else "bytecode; the decompiler could not handle it"
        out.heading(f"  Transformed code ({how}):")
        out.block(entry.code.source, "    ")
    out.add("")
    k = len(entry.subgraphs)
    out.heading(f"  There {'is' if k == 1 else 'are'} {_plural(k, 'subgraph')} in the function:")
    for i, sg in enumerate(entry.subgraphs, 1):
        ops = f" ({_plural(sg.op_count, 'op')})" if sg.op_count is not None else ""
        out.add("")
        out.heading(f"  Subgraph {i}: {sg.name}{ops}")
        out.block(sg.fx_code or "(FX code not available: the backend replaced the graph; "
                  "run under dynascope observation to keep it)", "    ")
    p = len(entry.resume_functions)
    if p:
        out.add("")
        out.heading(f"  There {'is' if p == 1 else 'are'} {_plural(p, 'resume function')}:")
    for i, rf in enumerate(entry.resume_functions, 1):
        _resume_lines(i, rf, depth, guard_limit, out)


def _resume_lines(i: int, rf: ResumeFunction, depth: int, guard_limit: int | None, out: Lines) -> None:
    out.add("")
    where = f" (resumes at line {rf.line})" if rf.line else ""
    out.heading(f"  Resume function {i}: {rf.name}{where}")
    if rf.continues_at is not None and rf.continues_at.line:
        out.add(f"    continues with line {rf.continues_at.line}: {rf.continues_at.code}")
    if rf.source:
        out.block(rf.source, "    ")
    if rf.explanation is not None and rf.explanation.cache_entries:
        out.add("")
        out.nest(explanation_lines(rf.explanation, depth + 1, guard_limit), "    | ")
    elif rf.explanation is None:
        out.add("    (not compiled yet: this branch has not run)")


def render_observations(obj: Explanation | Report) -> str:
    return observation_lines(obj).text()


def observation_lines(obj: Explanation | Report, costs: dict[str, str] | None = None,
                      wall_us: dict[str, int] | None = None) -> Lines:
    """Graph breaks, recompiles and compile times (and for a Report: limit hits, eager fallbacks, notes).
    `costs`: what each graph break cost at run time, in a few words, by compile id (from a trace of the
    same run), shown under the break; `wall_us`: each compile id's compile time in that trace (µs), which
    the compile times then show (with_wall_times), so that they agree with the report's."""
    out = Lines()
    if obj.graph_breaks:
        out.heading(f"Graph breaks ({len(obj.graph_breaks)} distinct):")
        for gb in obj.graph_breaks:
            where = f"{gb.file}:{gb.line}" if gb.file else "unknown location"
            out.add(f"  - {gb.reason}  at {where}  [{_plural(gb.count, 'time')}]")
            if gb.excerpt:
                out.block(gb.excerpt, "      | ")
            cost = next((costs[c] for c in gb.compile_ids if c in costs), None) if costs else None
            if cost:
                out.add(f"      run time: {cost}", NOTE)
    if obj.recompiles:
        if out:
            out.add("")
        out.heading(f"Recompiles ({len(obj.recompiles)}):")
        for rc in obj.recompiles:
            where = f" ({os.path.basename(rc.file)}:{rc.line})" if rc.file and rc.line else ""
            out.add(f"  - {rc.function or '?'}{where} recompiled as {rc.compile_id}: {rc.reason}")
            guarded = _guard_line_text(obj, rc)
            if guarded:
                out.add(f"      {guarded}")
            elif rc.call_file and rc.call_line:
                out.add(f"      called from {os.path.basename(rc.call_file)}:{rc.call_line}")
            for f in rc.failures[1:]:
                out.add(f"      also {f.compile_id}: {f.reason}")
    if isinstance(obj, Report) and obj.ddp_splits:
        if out:
            out.add("")
        out.extend(ddp_split_lines(obj.ddp_splits, costs))
    times = with_wall_times(obj.compile_times, wall_us) if wall_us else obj.compile_times
    if times:
        if out:
            out.add("")
        _compile_time_lines(times, out)
    if isinstance(obj, Report):
        _report_only_lines(obj, out)
    return out


def _guard_line_text(obj: Explanation | Report, rc: Recompile) -> str | None:
    """"guarded at model.py:30: x = ... (via torch/nn/modules/conv.py:560)": the user line that installed
    the guard that failed (the first failure's), as the recompiles-by-cost table names it."""
    failure = rc.failures[0] if rc.failures else None
    if failure is None or not failure.subject:
        return None
    entries: list[CacheEntry] = []
    todo = list(obj.explanations) if isinstance(obj, Report) else [obj]
    while todo:
        expl = todo.pop()
        for entry in expl.cache_entries:
            entries.append(entry)
            todo.extend(r.explanation for r in entry.resume_functions if r.explanation is not None)
    for entry in entries:
        if entry.compile_id != failure.compile_id:
            continue
        for group in entry.guards:
            if group.subject != failure.subject:
                continue
            guards = list(group.guards)
            if failure.reason.startswith("tensor '"):  # a tensor's mismatch: its tensor guard's line
                guards.sort(key=lambda g: g.kind != "TENSOR_MATCH")
            for g in guards:
                ul = g.user_line
                if ul is not None and ul.line:
                    via = f" (via {library_text(ul.library_file, ul.library_line)})" if ul.library_file else ""
                    code = f": {ul.code}" if ul.code else ""
                    return f"guarded at {os.path.basename(ul.file or '?')}:{ul.line}{code}{via}"
    return None


def _seconds(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def with_wall_times(times: list[CompileTime], wall_us: dict[str, int], add_traced: bool = True) -> list[CompileTime]:
    """The compile times as a trace of the same run measured them (`wall_us`: µs per compile id, the
    report's compile_vs_run rows: the wall-clock union of compiling on every thread, worker threads and
    lazily compiled backwards included, each instant charged to one compile id): total_s is the trace's,
    torch's own total kept as timers_s and its phase split as it is; with `add_traced`, a compile id only the
    trace has gets a row of its own (function unknown); one the trace does not have keeps torch's figure.
    Applying it again (to an explanation.json that `dynascope run` wrote with the trace's figures) keeps
    torch's timers_s."""
    out: list[CompileTime] = []
    for ct in times:
        mine = dataclasses.replace(ct)
        if str(ct.compile_id) in wall_us:
            mine.timers_s = ct.timers_s if ct.timers_s is not None else ct.total_s
            mine.total_s = wall_us[str(ct.compile_id)] / 1e6
        out.append(mine)
    known = {str(ct.compile_id) for ct in times}
    if add_traced:
        out += [CompileTime(compile_id=cid, function=None, total_s=us / 1e6, status="traced")
                for cid, us in wall_us.items() if cid not in known]  # fmt: skip
    return out


def apply_wall_times(report: Report, wall_us: dict[str, int]) -> Report:
    """`report` with every compile time (the run's, and each function's explanation's, resume functions'
    included) as the trace of the same run measured it (with_wall_times): what `dynascope run` writes to
    explanation.json, so that every reader of it shows the report's figures."""
    out = dataclasses.replace(report, compile_times=with_wall_times(report.compile_times, wall_us))

    def explained(expl: Explanation) -> Explanation:
        entries = [dataclasses.replace(e, resume_functions=[
            dataclasses.replace(rf, explanation=explained(rf.explanation)) if rf.explanation is not None else rf
            for rf in e.resume_functions]) for e in expl.cache_entries]  # fmt: skip
        return dataclasses.replace(expl, cache_entries=entries,
                                   compile_times=with_wall_times(expl.compile_times, wall_us, add_traced=False))

    out.explanations = [explained(e) for e in report.explanations]
    return out


def compile_times_heading(times: list[CompileTime]) -> str:
    """'N compiles, X s in all' and, on the same line, what the total holds: where it comes from (a trace's
    wall clock, or torch's timers) and whether lazily compiled backwards are in it."""
    total = sum(ct.total_s for ct in times if isinstance(ct.total_s, (int, float)))
    text = f"{_plural(len(times), 'compile')}, {total:.3f} s in all"
    if any(ct.timers_s is not None or ct.status == "traced" for ct in times):
        return text + "; wall clock from the run's trace, compile workers and lazily compiled backwards included"
    lazy = [ct.compile_id for ct in times if ct.backward_s]
    if lazy:
        text += f"; backwards compiled lazily at their first backward() included ({', '.join(lazy)})"
    return text + "; torch's own timers (a trace of the run measures the wall clock: dynascope run)"


def _compile_time_lines(times: list[CompileTime], out: Lines) -> None:
    out.heading(f"Compile times ({compile_times_heading(times)}):")
    lazy = any(ct.backward_s for ct in times)
    bw = f" {'backward':>8}" if lazy else ""
    out.add(f"  {'id':<8} {'total s':>8} {'dynamo':>8} {'aot':>8} {'backend':>8}{bw}  function")
    for ct in times:
        status = "" if ct.status in ("ok", "traced") else f"  [{ct.status}: {ct.fail_reason or ct.fail_type}]"
        bw = f" {_seconds(ct.backward_s):>8}" if lazy else ""
        out.add(f"  {ct.compile_id or '?':<8} {_seconds(ct.total_s):>8} {_seconds(ct.dynamo_s):>8} "
                f"{_seconds(ct.aot_s):>8} {_seconds(ct.backend_s):>8}{bw}  {ct.function or '?'}{status}")


def _report_only_lines(report: Report, out: Lines) -> None:
    if report.cache_limit_hits:
        out.add("")
        out.heading("Recompile limit hits (these functions now run eagerly):")
        for h in report.cache_limit_hits:
            out.add(f"  - {h.function} at {h.file}:{h.line}: limit {h.limit}; last reason: {h.reason}")
    if report.eager_fallbacks:
        out.add("")
        out.heading("Frames that fell back to eager:")
        for e in report.eager_fallbacks:
            out.add(f"  - {e.function} ({e.compile_id}) at {e.file}:{e.line}: {e.reason}")
    for note in report.notes:
        out.note(note)
