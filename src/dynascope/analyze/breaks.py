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
import re
from collections import defaultdict

import numpy as np
import polars as pl

from dynascope.analyze.read.columns import CALL_CAT, COMPILE_CAT, FRAME_CAT, GRAPH_CAT
from dynascope.artifacts.explanation import Report

__all__ = ["BREAK_KEYS", "CALL_KEYS", "ENTRY_KEYS", "FRAME_COLUMNS", "SCHEMAS", "frame_tables"]

# what a probe row carries (its OH record; capture/frames.py); `id` orders events of equal `ts`
FRAME_COLUMNS = [
    "id", "kind", "probe", "function", "qualname", "file", "line", "resume", "graphs", "breaks", "break_line",
    "reason", "break_file", "break_at", "break_code", "entry_function", "entry_file", "entry_line", "break_library",
]  # fmt: skip

_FUNCTION = ["qualname", "function", "file", "line"]  # a compiled function (or frame) by its code
# `warmup`: 1 for what happened in warm-up calls, those that compiled something or ran a cache entry for the
# first time (its first run sets up what no compile event covers), else 0
BREAK_KEYS = ["compile_id", *_FUNCTION, "break_line", "reason", "break_file", "break_at", "break_code",
              "break_library", "top_qualname", "top_file", "top_line", "warmup"]  # fmt: skip
CALL_KEYS = [*_FUNCTION, "warmup"]
ENTRY_KEYS = ["compile_id", *_FUNCTION, "resume", "warmup"]
_STR, _INT = pl.String, pl.Int64
SCHEMAS: dict[str, dict[str, pl.DataType | type[pl.DataType]]] = {
    "brk": {**dict.fromkeys(BREAK_KEYS, _STR), "line": _INT, "break_line": _INT, "break_at": _INT, "top_line": _INT,
            "warmup": _INT, "hits": _INT, "total_us": _INT},
    "calls": {"qualname": _STR, "function": _STR, "file": _STR, "line": _INT, "warmup": _INT, "calls": _INT,
              "wall_us": _INT, "graph_us": _INT, "compile_us": _INT, "break_us": _INT, "fallback_calls": _INT,
              "fallback_us": _INT, "overhead_us": _INT},
    # graphs: its own graph calls (not backward); gap_us: the eager time between its first and last (the pieces
    # of a graph DDPOptimizer split at DDP's buckets run one after another: ddp_split_rows)
    "entry": {"compile_id": _STR, "qualname": _STR, "function": _STR, "file": _STR, "line": _INT, "resume": _INT,
              "warmup": _INT, "calls": _INT, "wall_us": _INT, "graph_us": _INT, "graphs": _INT, "gap_us": _INT},
    "call_hist": {"qualname": _STR, "file": _STR, "line": _INT, "warmup": _INT, "dur": _INT, "n": _INT},
    # the compile ids that compiled or ran inside calls of a function (its compile cost: analyze/costs.py)
    "fn_ids": {"qualname": _STR, "file": _STR, "line": _INT, "compile_id": _STR, "n": _INT},
}  # fmt: skip

# a probe's spec: spec[i] is column i
_SPEC_COLUMNS = ("compile_id", "qualname", "function", "file", "line", "resume", "breaks", "break_line", "reason",
                 "break_file", "break_at", "break_code", "entry_function", "entry_file", "entry_line",
                 "break_library")  # fmt: skip
_SPEC_INTS = ("line", "resume", "breaks", "break_line", "break_at", "entry_line")
_CID, _QUALNAME, _FUNCTION_NAME, _FILE, _LINE, _RESUME, _BREAKS = range(7)
_ENTRY_FUNCTION, _ENTRY_FILE, _ENTRY_LINE = range(12, 15)  # a call's: the frame Dynamo compiles first
_BREAK_LIBRARY = 15  # "path:line" of the library line a break led to (it is charged to the first user frame)
# event kinds of a thread's sorted events
_GRAPH, _COMPILE, _FRAME_ENTER, _FRAME_EXIT, _CALL_ENTER, _CALL_EXIT = range(6)
_FRAME, _CALL = 0, 1


class _Run:
    """One frame run or one call: its times, its own graph calls, and what the join needs of its children."""

    __slots__ = ("end", "first_graph", "frames", "graph_us", "kids", "kind", "last_graph", "n_graphs", "parent",
                 "resume", "spec", "start")  # fmt: skip

    def __init__(self, kind: int, spec: int, start: int) -> None:
        self.kind, self.spec, self.start, self.end = kind, spec, start, start
        self.first_graph: int | None = None  # start of its first own graph call
        self.last_graph: int | None = None  # end of its last own graph call
        self.graph_us = 0  # its own graph calls (a call's: graphs of frames that carry no probes)
        self.n_graphs = 0  # how many
        self.resume: _Run | None = None  # the resume function it called after its graph break
        self.kids: list[_Run] | None = None  # a root's direct children
        self.frames: list[_Run] | None = None  # a root's frame runs, all depths
        self.parent: _Run | None = None  # the run it ran inside


def frame_tables(others: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """The `brk`, `calls`, `entry`, `call_hist` and `fn_ids` tables of one file's non-op rows (SCHEMAS)."""
    cats = pl.col("cat").cast(pl.String)
    rows = others.filter(cats.is_in([FRAME_CAT, CALL_CAT, GRAPH_CAT, COMPILE_CAT]) & pl.col("ts").is_not_null())
    if rows.filter(cats.is_in([FRAME_CAT, CALL_CAT])).height == 0:
        return {name: pl.DataFrame(schema=schema) for name, schema in SCHEMAS.items()}
    rows, specs = _with_spec_ids(rows)
    acc = _Accumulator(specs)
    for _, thread in rows.group_by(["pid", "tid"], maintain_order=True):
        acc.add_thread(thread)
    return acc.tables()


def _with_spec_ids(rows: pl.DataFrame) -> tuple[pl.DataFrame, list[tuple]]:
    """Each probe row's spec as a number (`_spec`, -1 for other rows), and the specs as tuples
    (_SPEC_COLUMNS); also `_kind` (the event kinds above) and `_cid`, the row's compile id (a graph's
    or a compile's, which the probes' specs do not cover)."""
    typed = rows.with_columns(
        *(pl.col(c).cast(pl.Int64 if c in _SPEC_INTS else pl.String, strict=False) for c in _SPEC_COLUMNS),
        pl.col("cat").cast(pl.String), pl.col("probe").cast(pl.String), pl.col("phase").cast(pl.String),
    )  # fmt: skip
    probes = typed.filter(pl.col("probe").is_not_null())
    uniq = probes.select(_SPEC_COLUMNS).unique(maintain_order=True).with_row_index("_spec")
    specs = [tuple(r) for r in uniq.drop("_spec").iter_rows()]
    typed = typed.join(uniq.with_columns(pl.col("_spec").cast(pl.Int64)), on=list(_SPEC_COLUMNS), how="left",
                       nulls_equal=True, maintain_order="left")  # fmt: skip
    cat, probe = pl.col("cat"), pl.col("probe")
    kind = (
        pl.when(cat == GRAPH_CAT).then(_GRAPH)
        .when(cat == COMPILE_CAT).then(_COMPILE)
        .when((cat == FRAME_CAT) & (probe == "enter")).then(_FRAME_ENTER)
        .when(cat == FRAME_CAT).then(_FRAME_EXIT)
        .when(probe == "enter").then(_CALL_ENTER)
        .otherwise(_CALL_EXIT)
    )  # fmt: skip
    return typed.with_columns(
        kind.alias("_kind"), pl.col("_spec").fill_null(-1), pl.col("dur").fill_null(0).clip(lower_bound=0),
        pl.col("compile_id").alias("_cid"),
    ), specs  # fmt: skip


class _Busy:
    """Time covered by a set of intervals (merged: none overlap), asked of any [a, b]: graph calls and
    compiles are not eager time."""

    def __init__(self, starts: list[int], ends: list[int]) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.before: list[int] = [0]  # time covered before interval i
        if not starts:
            return
        a, b = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
        order = np.argsort(a, kind="stable")
        a, b = a[order], b[order]
        reach = np.maximum.accumulate(b)  # the furthest end so far
        new = np.ones(a.size, dtype=bool)
        new[1:] = a[1:] > reach[:-1]  # an interval that starts after everything before it ended
        first = np.flatnonzero(new)
        last = np.append(first[1:], a.size) - 1
        merged_from, merged_to = a[first], reach[last]
        self.starts = merged_from.tolist()
        self.ends = merged_to.tolist()
        self.before = np.concatenate([[0], np.cumsum(merged_to - merged_from)]).tolist()

    def upto(self, t: int) -> int:
        """Time covered before t."""
        i = bisect.bisect_right(self.starts, t) - 1
        if i < 0:
            return 0
        return self.before[i] + min(t, self.ends[i]) - self.starts[i]

    def within(self, a: int, b: int) -> int:
        return self.upto(b) - self.upto(a) if b > a else 0


class _Compiles:
    """A thread's compile events (start, end, compile id), sorted, found by the interval they overlap."""

    def __init__(self, events: list[tuple[int, int, str | None]]) -> None:
        self.events = sorted(events, key=lambda e: e[0])
        self.starts = [e[0] for e in self.events]
        self.longest = max((e[1] - e[0] for e in self.events), default=0)

    def overlapping(self, a: int, b: int) -> list[tuple[int, int, str | None]]:
        lo = bisect.bisect_right(self.starts, a - self.longest - 1)
        hi = bisect.bisect_left(self.starts, b)
        return [e for e in self.events[lo:hi] if e[1] > a]


class _Accumulator:
    def __init__(self, specs: list[tuple]) -> None:
        self.specs = specs
        self.function = [(sp[_QUALNAME], sp[_FUNCTION_NAME], sp[_FILE], sp[_LINE]) for sp in specs]
        self.cid = [sp[_CID] for sp in specs]
        self.site = [_site_of(sp) for sp in specs]
        self.brk: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
        self.calls: dict[tuple, list[int]] = defaultdict(lambda: [0] * 8)
        self.entry: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
        self.hist: dict[tuple, int] = defaultdict(int)
        self.fn_ids: dict[tuple, int] = defaultdict(int)
        self.ran: set[str | None] = set()  # compile ids whose frame has run (in this file, as time goes)
        # frames of the wrapper torch puts around a compiled function (its resume functions too), named as
        # that function in the tables: spec -> the call's spec
        self.alias: dict[int, int] = {}

    def add_thread(self, thread: pl.DataFrame) -> None:
        t = thread.sort(["ts", "id"], nulls_last=True)
        kinds, specs = t.get_column("_kind").to_list(), t.get_column("_spec").to_list()
        ts, dur = t.get_column("ts").to_list(), t.get_column("dur").to_list()
        cids, phases = t.get_column("_cid").to_list(), t.get_column("phase").to_list()
        busy_from, busy_to, graph_from, graph_to, compiles = [], [], [], [], []
        for k, start, d, cid in zip(kinds, ts, dur, cids, strict=True):
            if k in (_GRAPH, _COMPILE):
                busy_from.append(start)
                busy_to.append(start + d)
                if k == _GRAPH:
                    graph_from.append(start)
                    graph_to.append(start + d)
                else:
                    compiles.append((start, start + d, cid))
        busy, graphs, found = _Busy(busy_from, busy_to), _Busy(graph_from, graph_to), _Compiles(compiles)
        spec_cid, resumes = self.cid, [sp[_RESUME] for sp in self.specs]
        stack: list[_Run] = []
        for k, spec, start, d, cid, phase in zip(kinds, specs, ts, dur, cids, phases, strict=True):
            if k == _GRAPH:
                if stack and phase != "backward":
                    top = stack[-1]
                    if top.kind == _CALL or spec_cid[top.spec] == cid:  # its own (a call's: unprobed frames')
                        if top.first_graph is None:
                            top.first_graph = start
                        top.last_graph = start + d
                        top.graph_us += d
                        top.n_graphs += 1
                continue
            if k == _COMPILE:
                continue
            kind = _FRAME if k < _CALL_ENTER else _CALL
            # an exit closes its run; an enter of a run still open means that one raised (an exception
            # skips the return probe): it, and what it left open, end here
            if stack and stack[-1].spec == spec and stack[-1].kind == kind:
                depth: int | None = len(stack) - 1  # the usual case: the innermost run ends
            else:
                depth = _open_run(stack, kind, spec)
            if depth is not None:
                for run in stack[depth:]:
                    run.end = start
                finished = stack[0] if depth == 0 else None
                del stack[depth:]
                if finished is not None:
                    self.add_root(finished, busy, graphs, found)
            if k not in (_FRAME_ENTER, _CALL_ENTER):
                continue
            run = _Run(kind, spec, start)
            if stack:
                root = stack[0]
                if len(stack) == 1:
                    root.kids.append(run)  # type: ignore[union-attr]
                parent = run.parent = stack[-1]
                if kind == _FRAME and resumes[spec] and parent.kind == _FRAME:
                    parent.resume = run
            else:
                root = run
                run.kids, run.frames = [], []
            if kind == _FRAME:
                root.frames.append(run)  # type: ignore[union-attr]
            stack.append(run)
        # a run still open when the trace ends (Ctrl-C, a crash): its costs are unknown, it is left out

    def add_root(self, root: _Run, busy: _Busy, graphs: _Busy, compiles: _Compiles) -> None:
        frames = root.frames or []
        top = self.function[root.spec]
        inside = compiles.overlapping(root.start, root.end)
        cids = {self.cid[f.spec] for f in frames}
        first_runs = cids - self.ran
        if first_runs:
            self.ran |= first_runs
        for cid in cids.union(c[2] for c in inside) if inside else cids:
            if cid is not None:
                self.fn_ids[(top[0], top[2], top[3], cid)] += 1
        warmup = 1 if inside or first_runs else 0
        regions = []  # (a, b, spec) of every break hit in this call
        for f in frames:
            sp = self.specs[f.spec]
            row = self.entry[(f.spec, warmup)]
            row[0] += 1
            row[1] += f.end - f.start
            row[2] += f.graph_us
            row[3] += f.n_graphs
            if f.n_graphs > 1 and f.first_graph is not None and f.last_graph is not None:
                row[4] += max(0, f.last_graph - f.first_graph - f.graph_us)
            if sp[_BREAKS]:
                regions.append((*_region(f), f.spec))
        break_us = self._charge(regions, busy, (*top, warmup)) if regions else 0
        wall = root.end - root.start
        graph_us = graphs.within(root.start, root.end)
        busy_us = busy.within(root.start, root.end)
        compile_us = busy_us - graph_us
        fallback_us, fallback = 0, 0
        kids = root.kids or []
        if root.kind == _CALL and self._ran_eagerly(root, kids, frames):
            # Dynamo ran the function itself eagerly: its eager time outside the compiled frames it called
            wrappers = [k for k in kids if k.kind == _FRAME and self._same_code(k.spec, root.spec)]
            kids = [f for f in frames if f.parent in wrappers] + [k for k in kids if k not in wrappers]
            outside = wall - sum(k.end - k.start for k in kids)
            busy_outside = busy_us - sum(busy.within(k.start, k.end) for k in kids)
            fallback_us, fallback = max(0, outside - busy_outside), 1
        overhead_us = wall - graph_us - compile_us - break_us - fallback_us
        row = self.calls[(root.spec, warmup)]
        row[0] += 1
        row[1] += wall
        row[2] += graph_us
        row[3] += compile_us
        row[4] += break_us
        row[5] += fallback
        row[6] += fallback_us
        row[7] += overhead_us
        self.hist[(root.spec, warmup, wall)] += 1

    def _charge(self, regions: list[tuple[int, int, int]], busy: _Busy, call: tuple) -> int:
        """Charge each break region its eager time less that of the regions inside it; the total.
        A region inside a region of the same break site (the same user line and reason: a break in a
        function Dynamo inlined splits the caller too) is the same hit."""
        if len(regions) > 1:
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
                if self.site[regions[enclosing[-1]][2]] == self.site[regions[i][2]]:
                    hit[i] = 0
            enclosing.append(i)
        total = 0
        for (_, _, spec), c, h in zip(regions, cost, hit, strict=True):
            # call: the top function (qualname, function, file, line) and whether this call was a warm-up
            row = self.brk[(spec, call)]
            row[0] += h
            row[1] += max(c, 0)
            total += max(c, 0)
        return total

    def _ran_eagerly(self, root: _Run, kids: list[_Run], frames: list[_Run]) -> bool:
        """Whether no compiled frame of the called function ran: Dynamo ran it as plain Python. Where torch
        compiles a wrapper frame around it (torch.nn's own modules), that frame is the function's only if
        it ran a graph (the function inlined into it); its frames are then named as the function."""
        own = [k for k in kids if k.kind == _FRAME and self._same_code(k.spec, root.spec)]
        if any(f.kind == _FRAME and self._is_function(f.spec, root.spec) for f in frames):
            # the function's own frame ran as Dynamo's code, at any depth: under a decorator's wrapper
            # (functools.wraps, as transformers' forwards have) Dynamo compiles the wrapper first and, where
            # the wrapper split at the call, the function as a frame of its own beneath it
            return False
        if self.specs[root.spec][_ENTRY_FILE] is None:
            return not own
        inlined = [k for k in own if k.first_graph is not None]
        for f in frames if inlined else []:
            if self._same_code(f.spec, root.spec):
                self.alias[f.spec] = root.spec
        return not inlined

    def _is_function(self, frame_spec: int, call_spec: int) -> bool:
        """Whether a frame (not a resume function's) is of the called function's own code."""
        f, c = self.specs[frame_spec], self.specs[call_spec]
        return (not f[_RESUME] and f[_FILE] == c[_FILE] and f[_LINE] == c[_LINE]
                and f[_FUNCTION_NAME] == c[_FUNCTION_NAME])  # fmt: skip

    def _same_code(self, frame_spec: int, call_spec: int) -> bool:
        """Whether a frame is the one Dynamo compiles first for a call: the function's own code, or the
        frame torch puts around it (`entry_*`: torch.nn's own modules get `wrap_inline`'s)."""
        f, c = self.specs[frame_spec], self.specs[call_spec]
        if c[_ENTRY_FILE] is not None:
            return f[_FILE] == c[_ENTRY_FILE] and f[_FUNCTION_NAME] == c[_ENTRY_FUNCTION]
        return f[_FILE] == c[_FILE] and f[_LINE] == c[_LINE] and f[_FUNCTION_NAME] == c[_FUNCTION_NAME]

    def tables(self) -> dict[str, pl.DataFrame]:
        def frame(name: str, rows: list[tuple]) -> pl.DataFrame:
            return pl.DataFrame(rows, schema=SCHEMAS[name], orient="row")

        specs = self.specs
        function = [self.function[self.alias.get(spec, spec)] for spec in range(len(specs))]
        brk = [(sp[_CID], *function[spec], *sp[7:12], sp[_BREAK_LIBRARY], call[0], call[2], call[3], call[4], *v)
               for (spec, call), v in self.brk.items() for sp in (specs[spec],)]  # fmt: skip
        calls = [(*function[spec], warmup, *v) for (spec, warmup), v in self.calls.items()]
        entry = [(specs[spec][_CID], *function[spec], specs[spec][_RESUME], warmup, *v)
                 for (spec, warmup), v in self.entry.items()]  # fmt: skip
        hist = [(function[spec][0], function[spec][2], function[spec][3], warmup, wall, n)
                for (spec, warmup, wall), n in self.hist.items()]  # fmt: skip
        return {
            "brk": frame("brk", brk),
            "calls": frame("calls", calls),
            "entry": frame("entry", entry),
            "call_hist": frame("call_hist", hist),
            "fn_ids": frame("fn_ids", [(*k, v) for k, v in self.fn_ids.items()]),
        }


def _site_of(spec: tuple) -> tuple:
    """Where a frame's break happened, as (file, line, reason): the library line it led to where there is
    one (a frame Dynamo compiled of the library function itself splits there), else the line charged."""
    lib = re.match(r"^(.*):(\d+)$", spec[_BREAK_LIBRARY] or "")
    if lib:
        return (lib.group(1), int(lib.group(2)), spec[8])
    return (spec[9], spec[10], spec[8]) if spec[10] is not None else (spec[_FILE], spec[7], spec[8])


def _open_run(stack: list[_Run], kind: int, spec: int) -> int | None:
    for depth in range(len(stack) - 1, -1, -1):
        if stack[depth].kind == kind and stack[depth].spec == spec:
            return depth
    return None


def _region(frame: _Run) -> tuple[int, int]:
    """The break region of a frame run that split at a graph break (module docstring)."""
    a = frame.last_graph if frame.last_graph is not None else frame.start
    resume = frame.resume
    b = frame.end if resume is None else resume.first_graph if resume.first_graph is not None else resume.start
    return (a, max(a, b))


# ------------------------------------------------------------------------------------------------
# DDPOptimizer's splits: not graph breaks of the user's, but a row of their own in the same table

_DDP_PIECE = re.compile(r"^(?P<base>.*)\[ddp (?P<piece>\d+)/(?P<pieces>\d+)\]$")
DDP_SPLIT_KIND = "ddp split"


def ddp_split_rows(graph: pl.DataFrame, entry: pl.DataFrame, explanation: Report | None, steps: int) -> list[dict]:
    """One row per graph DDPOptimizer split at DDP's buckets (the trace names its pieces
    "__compiled_fn_1[ddp 2/4]"), in the graph-break table's shape (analyze/costs.py) with kind DDP_SPLIT_KIND:
    its graphs, and what the split costs each call, measured: the eager time between the first piece's start
    and the last one's end that is not in a piece (each piece's launch: its AOT wrappers and Python calls),
    from its frame's cache entry (`gap_us`); what the explanation knows of it (cap, buckets) where there is one."""
    from dynascope.analyze.fixes import ddp_split_fix

    pieces: dict[str, tuple[str, int]] = {}  # compile id -> (graph, pieces)
    for r in graph.iter_rows(named=True):
        m = _DDP_PIECE.match(str(r.get("graph") or ""))
        if m and r.get("compile_id") is not None:
            pieces[str(r["compile_id"])] = (m["base"], int(m["pieces"]))
    if not pieces:
        return []
    described = {str(d.compile_id): d for d in (explanation.ddp_splits if explanation else [])}
    rows = []
    for cid, (base, count) in sorted(pieces.items()):
        sides: dict[int, list[int]] = {}
        name = file = line = None
        for r in entry.filter(pl.col("compile_id") == cid).iter_rows(named=True):
            side = sides.setdefault(int(r["warmup"] or 0), [0, 0, 0, 0])
            for i, key in enumerate(("calls", "wall_us", "graphs", "gap_us")):
                side[i] += int(r.get(key) or 0)
            name, file, line = r["qualname"] or r["function"], r["file"], r["line"]
        steady = 0 in sides and sides[0][0] > 0
        calls, wall, graphs, gap = sides.get(0 if steady else 1, [0, 0, 0, 0])
        warm = sides.get(1, [0, 0, 0, 0])
        split = described.get(cid)
        cap_mb = split.cap_mb if split and isinstance(split.cap_bytes, (int, float)) else None
        if split:
            file, line = split.file or file, split.line or line
        per_call = gap / calls if calls else None
        cap = f" (bucket_cap_mb={cap_mb:g})" if cap_mb is not None else ""
        boundaries = count - 1
        reason = (f"DDP split the graph at {boundaries} bucket boundar{'y' if boundaries == 1 else 'ies'}{cap}: "
                  f"{count} graphs instead of 1")  # fmt: skip
        buckets = [f"[ddp {b.piece}/{count}] bucket {b.bucket}: {b.params} parameters, "
                   f"{int(b.bytes or 0) / 2**20:.2f} MB, {b.layers}"
                   for b in (split.buckets if split else [])]  # fmt: skip
        rows.append({
            "source": f"{file.rsplit('/', 1)[-1]}:{line}" if file and line else None, "reason": reason,
            "fix": ddp_split_fix(cap_mb, count), "calls": calls, "total_us": gap, "per_call_us": per_call,
            "per_step_us": gap / steps if steps else None, "per_hit_us": per_call,
            "share": gap / wall if wall else None,
            "kind": DDP_SPLIT_KIND, "function": name or (split.function if split else None), "file": file, "line": line,
            "code": None, "compile_ids": [cid], "warmup_calls": warm[0], "warmup_us": warm[3],
            "warmup_only": not steady, "measurable": per_call is not None and per_call >= 2,
            "note": (f"DDPOptimizer's split of {base}, not a graph break in your code; {graphs / calls:.0f} graphs a "
                     "call, timed: the time between them" if calls else f"DDPOptimizer's split of {base}"),
            "detail": "\n".join(buckets) or None, "library": None, "_wall": wall,
        })  # fmt: skip
    return _one_row_a_split_site(rows, steps)


def _one_row_a_split_site(rows: list[dict], steps: int) -> list[dict]:
    """One row per line and split: a recompiled function's new graph is split again (compile 0/1 beside 0/0,
    on one rank of a job), at the same line; its calls and time join the first's."""
    merged: dict[tuple, dict] = {}
    for r in rows:
        key = (r["source"], r["reason"])
        have = merged.get(key)
        if have is None:
            merged[key] = r
            continue
        for k in ("calls", "total_us", "warmup_calls", "warmup_us", "_wall"):
            have[k] = (have[k] or 0) + (r[k] or 0)
        have["compile_ids"] = have["compile_ids"] + r["compile_ids"]
        have["warmup_only"] = have["warmup_only"] and r["warmup_only"]
        calls, gap = have["calls"], have["total_us"]
        have["per_call_us"] = have["per_hit_us"] = gap / calls if calls else None
        have["per_step_us"] = gap / steps if steps else None
        have["share"] = gap / have["_wall"] if have["_wall"] else None
        have["measurable"] = have["per_call_us"] is not None and have["per_call_us"] >= 2
    for r in merged.values():
        del r["_wall"]
    return list(merged.values())
