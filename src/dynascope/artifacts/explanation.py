"""The explanation of a run or a function, as plain data: what `dynascope explain`, `dynascope run` and
`dynascope.explain(fn)` produce, and what explanation.json holds.

Dataclasses only (no torch): an Explanation can be loaded from explanation.json and printed on a
machine without torch. The JSON layout is documented in docs/explain-format.md; `to_dict()` produces
exactly that layout and `from_dict()` reads it back. Printing one (`str`) goes through
render/explanation_text.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dynascope.artifacts._data import Data as _Data
from dynascope.artifacts.memory import GraphMemory

SCHEMA = "dynascope.explanation/1"
RESUME_MARKER = "  <== resume in this line"  # ends the source line a resume function starts at


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


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else (plural or word + 's')}"



def _mb(value: float | None) -> str:
    return "?" if value is None else f"{value:g}" if value >= 0.01 else f"{value:.3g}"



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
        from dynascope.render.explanation_text import render_text  # the one edge from data to its renderer

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
    # what each graph split into forward and backward keeps for the backward, recomputes, and peaks at
    memory: list[GraphMemory] = field(default_factory=list)
    _nested: ClassVar[dict[str, type]] = {
        "explanations": Explanation, "graph_breaks": GraphBreak, "recompiles": Recompile,
        "compile_times": CompileTime, "cache_limit_hits": CacheLimitHit, "eager_fallbacks": EagerFallback,
        "ddp_splits": DdpSplit, "memory": GraphMemory,
    }

    @classmethod
    def from_json(cls, text: str) -> Report:
        return cls.from_dict(json.loads(text))

    def __str__(self) -> str:
        from dynascope.render.explanation_text import render_report  # the one edge from data to its renderer

        return render_report(self)


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


