"""An explanation as text: what `dynascope explain` prints and `str(explanation)` returns (the terminal
command adds colour on top of this, dynascope.console styles the roles)."""

from __future__ import annotations

import os
import textwrap

from dynascope.artifacts.explanation import (
    RESUME_MARKER,
    CacheEntry,
    CompileTime,
    DdpSplit,
    Explanation,
    Recompile,
    Report,
    ResumeFunction,
    _plural,
    with_wall_times,
)
from dynascope.artifacts.memory import GraphMemory, LiveTensor, human_bytes, saved_by_layer
from dynascope.console import make_console, print_lines, print_rule
from dynascope.userframes import library_text

HEADING, NOTE, RESUME = "heading", "note", "resume"  # roles of report lines (Lines); dynascope.console styles them


DDP_KNOBS = (
    "DDP(model, bucket_cap_mb=N) sets the pieces: a bigger cap gives fewer graphs (more fusion, fewer launches) "
    "and all-reduces that start later in backward; torch._dynamo.config.optimize_ddp = False compiles one graph "
    "(no split, but every all-reduce waits for the whole backward: no overlap); optimize_ddp = \"python_reducer\" "
    "with compiled autograd (torch._dynamo.config.compiled_autograd = True) traces DDP's all-reduces into the "
    "compiled backward: one graph, with overlap (experimental)"
)


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


def memory_lines(graphs: list[GraphMemory]) -> Lines:
    """What each compiled graph saves for the backward, what it recomputes there, and its estimated peaks."""
    out = Lines()
    out.heading("Memory kept for the backward (AOTAutograd's partition of each graph, at the sizes seen; "
                "docs/memory.md):")
    for graph in graphs:
        activations = [t for t in graph.saved if t.kind == "activation"]
        inputs = [t.op or t.name for t in graph.saved if t.kind == "input"]
        name = graph.graph or "graph"
        piece = f" part {graph.part}" if graph.part > 1 else ""
        kept = f"; keeps {_plural(len(inputs), 'input')} ({', '.join(inputs)})" if inputs else ""
        out.add(f"  - {name} (compile {graph.compile_id or '?'}{piece}): saves {human_bytes(graph.saved_bytes)} "
                f"in {_plural(len(activations), 'activation')}{kept}")
        for half, peak in (("forward", graph.forward_peak), ("backward", graph.backward_peak)):
            if peak is not None and peak.at is not None:
                out.add(f"      estimated {half} peak {human_bytes(peak.bytes)} at {_where(peak.at)}"
                        + (f"; biggest live: {_where(peak.largest)}" if peak.largest else "")
                        + (f"; inductor's estimate {human_bytes(peak.inductor_bytes)}"
                           if peak.inductor_bytes is not None else ""))
        for t in sorted(activations, key=lambda t: -t.bytes):
            size = f"{t.bytes_expr} = " if t.bytes_expr else ""
            what = f"{t.name} {t.shape} {t.dtype}{_at(t.file, t.line)}  {t.code}".rstrip()
            out.add(f"      {t.layer or '(top level)':<16} {size}{human_bytes(t.bytes):>8}  {what}")
        if graph.recomputed:
            ops = ", ".join(f"{r.name}{_at(r.file, r.line)}" for r in graph.recomputed)
            out.add(f"      recomputed in the backward instead of saved: {ops}")
    if len(graphs) > 1:
        out.add("    per layer, all graphs: " + ", ".join(
            f"{row.layer or '(top level)'} {human_bytes(row.bytes)}" for row in saved_by_layer(graphs)))
    return out


def _where(t: LiveTensor) -> str:
    layer = f" in {t.layer}" if t.layer else ""
    return f"{t.node} ({human_bytes(t.bytes)}{layer}{_at(t.file, t.line).replace(' (', ', ').rstrip(')')})"


def _at(file: str, line: int) -> str:
    return f" ({file}:{line})" if file and line else ""


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
    if isinstance(obj, Report) and obj.memory:
        if out:
            out.add("")
        out.extend(memory_lines(obj.memory))
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


def render_report(report: Report) -> str:
    """A whole run's explanation: each function's, then what the run observed."""
    parts = [render_text(e) for e in report.explanations]
    parts.append(render_observations(report))
    return "\n\n".join(p for p in parts if p.strip())


# ------------------------------------------------------------------------------------------------
# The terminal (colour through dynascope.console)
# ------------------------------------------------------------------------------------------------

TERMINAL_GUARD_LIMIT = 40  # checks shown per variable on the terminal; --out files have all of them


def print_report(report: Report, costs: dict[str, str] | None = None, wall_us: dict[str, int] | None = None) -> None:
    """The report on the terminal; `costs`: each graph break's run-time cost by compile id, `wall_us`: each
    compile id's compile time (see observation_lines), where a trace of the same run is at hand."""
    console = make_console(soft_wrap=True)
    if not report.explanations:
        console.print("No function was compiled by torch.compile (or every cache entry was cleared).", markup=False)
    for expl in report.explanations:
        fn = expl.function
        print_rule(console, f"{fn.qualname or fn.name}  ({fn.where()})")
        print_lines(console, explanation_lines(_without_records(expl), guard_limit=TERMINAL_GUARD_LIMIT).rows)
        console.print()
    obs = observation_lines(report, costs, wall_us)
    if obs:
        print_rule(console, "What happened while the script ran")
        print_lines(console, obs.rows)


def _without_records(expl: Explanation) -> Explanation:
    """The per-function text without the observations (printed once for the whole run)."""
    return Explanation(function=expl.function, source=expl.source, kind=expl.kind,
                       cache_entries=expl.cache_entries, notes=expl.notes)
