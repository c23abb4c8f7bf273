"""What each graph break costs at run time, and what each compiled call is made of.

The trace has, per thread, the compiled graphs' calls (`dynamo.graph`), and instants where each frame
Dynamo generated starts and returns (`dynamo.frame`, with its compile id and, where it split at a graph
break, the break) and where each call of a torch.compile'd function starts and ends (`dynamo.call`).
They nest: a call holds its function's frame, a frame holds its graph call and, after a graph break, the
call of its resume function, itself a frame (docs/trace-format.md, "Frames and graph breaks").

**A break's region.** A frame F that split at a graph break runs its graph, then the breaking code
eagerly, then calls its resume function R. Each time, the break holds the run from the end of F's graph
(F's start where it has none) to the start of R's graph (R's start where R has none before its own break;
F's return where R did not run as generated code, as when Dynamo left it uncompiled). Its cost is the
eager time in that region: its length less the graph calls inside it (a compiled function the breaking
code calls runs graphs too), less the eager time of the regions of other breaks inside it (that code's own
breaks, charged to them). Regions nest or are disjoint, so every eager microsecond of a call is charged
once: to the innermost break region holding it, else to the call's overhead (guard checks, argument
handling, the frames' own code around their graphs), or, for a call whose function Dynamo did not
compile (it gave up on it), to that fallback.

So, per call: wall = graph time + break costs + fallback + overhead, exactly (integer µs).

Per file this gives mergeable tables (analyze/partial.py): `brk` per break site (the frame's compile id
and break), `calls` per compiled function, `entry` per cache entry (compile id), `call_hist` the
distribution of call times (for medians). Only threads with probes are looked at.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable

import polars as pl

from .columns import CALL_CAT, COMPILE_CAT, FRAME_CAT, GRAPH_CAT

__all__ = ["BREAK_KEYS", "CALL_KEYS", "ENTRY_KEYS", "FRAME_COLUMNS", "SCHEMAS", "frame_tables"]

# what a probe row carries (its OH record; capture/frames.py); `id` orders events of equal `ts`
FRAME_COLUMNS = [
    "id", "kind", "probe", "function", "qualname", "file", "line", "resume", "graphs", "breaks", "break_line",
    "reason", "break_file", "break_at", "break_code",
]  # fmt: skip

_FUNCTION = ["qualname", "function", "file", "line"]  # a compiled function (or frame) by its code
# `warmup`: 1 for what happened in warm-up calls, those that compiled something or ran a cache entry for the
# first time (its first run sets up what no compile event covers), else 0
BREAK_KEYS = ["compile_id", *_FUNCTION, "break_line", "reason", "break_file", "break_at", "break_code",
              "top_qualname", "top_file", "top_line", "warmup"]  # fmt: skip
CALL_KEYS = [*_FUNCTION, "warmup"]
ENTRY_KEYS = ["compile_id", *_FUNCTION, "resume", "warmup"]
_STR, _INT = pl.String, pl.Int64
SCHEMAS: dict[str, dict[str, pl.DataType | type[pl.DataType]]] = {
    "brk": {**dict.fromkeys(BREAK_KEYS, _STR), "line": _INT, "break_line": _INT, "break_at": _INT, "top_line": _INT,
            "warmup": _INT, "hits": _INT, "total_us": _INT},
    "calls": {"qualname": _STR, "function": _STR, "file": _STR, "line": _INT, "warmup": _INT, "calls": _INT,
              "wall_us": _INT, "graph_us": _INT, "compile_us": _INT, "break_us": _INT, "fallback_calls": _INT,
              "fallback_us": _INT, "overhead_us": _INT},
    "entry": {"compile_id": _STR, "qualname": _STR, "function": _STR, "file": _STR, "line": _INT, "resume": _INT,
              "warmup": _INT, "calls": _INT, "wall_us": _INT, "graph_us": _INT},
    "call_hist": {"qualname": _STR, "file": _STR, "line": _INT, "warmup": _INT, "dur": _INT, "n": _INT},
    # the compile ids that compiled or ran inside calls of a function (its compile cost: analyze/costs.py)
    "fn_ids": {"qualname": _STR, "file": _STR, "line": _INT, "compile_id": _STR, "n": _INT},
}  # fmt: skip

_GRAPH, _FRAME, _CALL = 0, 1, 2


class _Node:
    """One frame run or one call, with what ran inside it: graph calls (start, end) and nodes."""

    __slots__ = ("end", "graphs", "kids", "kind", "spec", "start")

    def __init__(self, kind: int, spec: tuple, start: int) -> None:
        self.kind, self.spec, self.start = kind, spec, start
        self.end = start
        self.kids: list[_Node] = []
        self.graphs: list[tuple[int, int]] = []


def frame_tables(others: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """The `brk`, `calls`, `entry`, `call_hist` and `fn_ids` tables of one file's non-op rows (SCHEMAS)."""
    cats = pl.col("cat").cast(pl.String)
    has_probes = others.filter(cats.is_in([FRAME_CAT, CALL_CAT])).height > 0
    if not has_probes:
        return {name: pl.DataFrame(schema=schema) for name, schema in SCHEMAS.items()}
    acc = _Accumulator()
    rows = others.filter(cats.is_in([FRAME_CAT, CALL_CAT, GRAPH_CAT, COMPILE_CAT]) & pl.col("ts").is_not_null())
    for _, thread in rows.group_by(["pid", "tid"], maintain_order=True):
        roots, compiles = _tree(thread)
        found = _Compiles(compiles)
        for root in roots:
            acc.add_root(root, found)
    return acc.tables()


def _tree(thread: pl.DataFrame) -> tuple[list[_Node], list[tuple[int, int, str | None]]]:
    """The calls and frame runs of one thread, nested, with their graph calls; and its compile intervals."""
    t = thread.sort(["ts", "id"], nulls_last=True)
    cat = t.get_column("cat").cast(pl.String).to_list()
    ts = t.get_column("ts").to_list()
    dur = t.get_column("dur").fill_null(0).to_list()
    phase = t.get_column("phase").cast(pl.String).to_list()
    probe = t.get_column("probe").cast(pl.String).to_list()
    spec_cols = [t.get_column(c).cast(pl.String if c not in ("line", "resume", "breaks", "break_line", "break_at")
                                      else pl.Int64).to_list()
                 for c in ("compile_id", "qualname", "function", "file", "line", "resume", "breaks", "break_line",
                           "reason", "break_file", "break_at", "break_code")]  # fmt: skip
    specs = list(zip(*spec_cols, strict=True))
    roots: list[_Node] = []
    stack: list[_Node] = []
    compiles: list[tuple[int, int, str | None]] = []
    for i, c in enumerate(cat):
        if c == GRAPH_CAT:
            if stack and phase[i] != "backward":
                stack[-1].graphs.append((ts[i], ts[i] + dur[i]))
        elif c == COMPILE_CAT:
            compiles.append((ts[i], ts[i] + dur[i], specs[i][0]))
        elif probe[i] in ("enter", "exit"):
            kind = _FRAME if c == FRAME_CAT else _CALL
            # an exit closes its run; an enter of a run still open means that one raised (an exception
            # skips the return probe): it, and what it left open, end here
            depth = _open_run(stack, kind, specs[i])
            if depth is not None:
                for node in stack[depth:]:
                    node.end = ts[i]
                del stack[depth:]
            if probe[i] == "enter":
                node = _Node(kind, specs[i], ts[i])
                (stack[-1].kids if stack else roots).append(node)
                stack.append(node)
    if stack:  # the trace ends inside a call (Ctrl-C, a crash): its costs are unknown, leave it out
        roots.remove(stack[0])
    return roots, sorted(compiles)


def _open_run(stack: list[_Node], kind: int, spec: tuple) -> int | None:
    for depth in range(len(stack) - 1, -1, -1):
        if stack[depth].kind == kind and stack[depth].spec == spec:
            return depth
    return None


class _Compiles:
    """A thread's compile events (start, end, compile id), sorted, found by the interval they overlap."""

    def __init__(self, events: list[tuple[int, int, str | None]]) -> None:
        self.events = events
        self.starts = [e[0] for e in events]
        self.longest = max((e[1] - e[0] for e in events), default=0)

    def overlapping(self, a: int, b: int) -> list[tuple[int, int, str | None]]:
        lo = bisect.bisect_right(self.starts, a - self.longest - 1)
        hi = bisect.bisect_left(self.starts, b)
        return [e for e in self.events[lo:hi] if e[1] > a]


def _merged(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


class _Busy:
    """Time inside [a, b] covered by a set of intervals (merged first: no two overlap)."""

    def __init__(self, intervals: list[tuple[int, int]]) -> None:
        graphs = _merged(intervals)
        self.starts = [g[0] for g in graphs]
        self.ends = [g[1] for g in graphs]
        self.before = [0]
        for s, e in graphs:
            self.before.append(self.before[-1] + (e - s))

    def within(self, a: int, b: int) -> int:
        if b <= a:
            return 0
        lo = bisect.bisect_right(self.ends, a)  # first graph ending after a
        hi = bisect.bisect_left(self.starts, b)  # graphs starting before b
        if hi <= lo:
            return 0
        total = self.before[hi] - self.before[lo]
        total -= max(0, a - self.starts[lo])  # clip the first and last to [a, b]
        total -= max(0, self.ends[hi - 1] - b)
        return max(total, 0)


def _walk(node: _Node) -> Iterable[_Node]:
    yield node
    for kid in node.kids:
        yield from _walk(kid)


def _region(frame: _Node) -> tuple[int, int] | None:
    """The break region of a frame run that split at a graph break (module docstring), or None."""
    if not frame.spec[6]:  # breaks
        return None
    resumes = [k for k in frame.kids if k.kind == _FRAME and k.spec[5]]
    resume = resumes[-1] if resumes else None
    limit = resume.start if resume is not None else frame.end
    own = [e for s, e in frame.graphs if e <= limit]
    a = max(own) if own else frame.start
    b = frame.end if resume is None else min((s for s, _ in resume.graphs), default=resume.start)
    return (a, max(a, b))


class _Accumulator:
    def __init__(self) -> None:
        self.brk: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
        self.calls: dict[tuple, list[int]] = defaultdict(lambda: [0] * 8)
        self.entry: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0])
        self.hist: dict[tuple, int] = defaultdict(int)
        self.fn_ids: dict[tuple, int] = defaultdict(int)
        self.ran: set[str | None] = set()  # compile ids whose frame has run (in this file, as time goes)

    def add_root(self, root: _Node, compiles: _Compiles) -> None:
        nodes = list(_walk(root))
        graphs = [g for n in nodes for g in n.graphs]
        graph_time = _Busy(graphs)
        # not eager: graph calls, and compiling (a frame's first run compiles its resume function)
        inside = compiles.overlapping(root.start, root.end)
        compiling_in = [(max(a, root.start), min(b, root.end)) for a, b, _ in inside]
        busy = _Busy(graphs + compiling_in)
        top = _function(root.spec)
        for cid in {c[2] for c in inside} | {n.spec[0] for n in nodes if n.kind == _FRAME}:
            if cid is not None:
                self.fn_ids[(top[0], top[2], top[3], cid)] += 1
        frames = [n for n in nodes if n.kind == _FRAME]
        first_runs = {n.spec[0] for n in frames} - self.ran
        self.ran |= first_runs
        warmup = int(bool(compiling_in or first_runs))
        regions = []  # (a, b, spec) of every break hit in this call
        for n in frames:
            self._entry(n, warmup)
            region = _region(n)
            if region is not None:
                regions.append((*region, n.spec))
        break_us = self._charge(regions, busy, (*top, warmup))
        wall = root.end - root.start
        graph_us = graph_time.within(root.start, root.end)
        compile_us = busy.within(root.start, root.end) - graph_us
        fallback_us, fallback = 0, 0
        if root.kind == _CALL and not any(k.kind == _FRAME and _same_code(k.spec, root.spec) for k in root.kids):
            # Dynamo ran the function itself eagerly: its eager time outside the compiled frames it called
            outside = [(root.start, root.end)]
            for kid in root.kids:
                outside = _cut(outside, kid.start, kid.end)
            fallback_us = sum(b - a - busy.within(a, b) for a, b in outside)
            fallback = 1
        overhead_us = wall - graph_us - compile_us - break_us - fallback_us
        row = self.calls[(top[0], top[1], top[2], top[3], warmup)]
        for k, v in enumerate((1, wall, graph_us, compile_us, break_us, fallback, fallback_us, overhead_us)):
            row[k] += v
        self.hist[(top[0], top[2], top[3], warmup, wall)] += 1

    def _entry(self, frame: _Node, warmup: int) -> None:
        spec = frame.spec
        key = (spec[0], *_function(spec), spec[5], warmup)
        row = self.entry[key]
        row[0] += 1
        row[1] += frame.end - frame.start
        row[2] += sum(e - s for s, e in frame.graphs)

    def _charge(self, regions: list[tuple[int, int, tuple]], busy: _Busy, call: tuple) -> int:
        """Charge each break region its eager time less that of the regions inside it; the total.
        A region inside a region of the same break site (the same user line and reason: a break in a
        function Dynamo inlined splits the caller too) is the same hit."""
        regions.sort(key=lambda r: (r[0], -r[1]))
        eager = [b - a - busy.within(a, b) for a, b, _ in regions]
        hit = [1] * len(regions)
        cost = list(eager)
        enclosing: list[int] = []  # the regions that hold the current one, innermost last
        for i, (a, _, _) in enumerate(regions):
            while enclosing and regions[enclosing[-1]][1] <= a:  # regions nest or are disjoint
                enclosing.pop()
            if enclosing:
                cost[enclosing[-1]] -= eager[i]
                if _site(regions[enclosing[-1]][2]) == _site(regions[i][2]):
                    hit[i] = 0
            enclosing.append(i)
        total = 0
        for (_, _, spec), c, h in zip(regions, cost, hit, strict=True):
            # call: the top function (qualname, function, file, line) and whether this call was a warm-up
            key = (spec[0], *_function(spec), *spec[7:12], call[0], call[2], call[3], call[4])
            row = self.brk[key]
            row[0] += h
            row[1] += max(c, 0)
            total += max(c, 0)
        return total

    def tables(self) -> dict[str, pl.DataFrame]:
        def frame(name: str, rows: list[tuple]) -> pl.DataFrame:
            schema = SCHEMAS[name]
            return pl.DataFrame(rows, schema=schema, orient="row")

        return {
            "brk": frame("brk", [(*k, *v) for k, v in self.brk.items()]),
            "calls": frame("calls", [(*k, *v) for k, v in self.calls.items()]),
            "entry": frame("entry", [(*k, *v) for k, v in self.entry.items()]),
            "call_hist": frame("call_hist", [(*k, v) for k, v in self.hist.items()]),
            "fn_ids": frame("fn_ids", [(*k, v) for k, v in self.fn_ids.items()]),
        }


def _function(spec: tuple) -> tuple:
    """(qualname, function, file, line) of a probe's spec."""
    return (spec[1], spec[2], spec[3], spec[4])


def _site(spec: tuple) -> tuple:
    """A break by what the user sees: the line that caused it and torch's reason (else the frame's line)."""
    return (spec[9], spec[10], spec[8]) if spec[10] is not None else (spec[3], spec[7], spec[8])


def _cut(pieces: list[tuple[int, int]], a: int, b: int) -> list[tuple[int, int]]:
    """`pieces` less [a, b]."""
    out = []
    for s, e in pieces:
        if e <= a or s >= b:
            out.append((s, e))
            continue
        if s < a:
            out.append((s, a))
        if e > b:
            out.append((b, e))
    return out


def _same_code(frame_spec: tuple, call_spec: tuple) -> bool:
    return frame_spec[3] == call_spec[3] and frame_spec[4] == call_spec[4] and frame_spec[2] == call_spec[2]

