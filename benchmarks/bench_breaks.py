"""What costing graph breaks costs: run time added per break hit, and the analysis time of the join.

Run time: functions with K graph breaks a call (K = 1, 4, 16; each a no-op `torch.compiler.disable`d
helper between tiny ops), compiled three ways, each with code objects of its own: plain torch.compile
(aot_eager, no session: the untraced baseline), dynascope's backend with frame events off (graph calls
and ops traced: what the trace held before), and with frame events on (the probes: each compiled frame's
start and returns, each compiled call). Interleaved blocks in one process, the median call of each; the
added time per break hit is the slope of (frames on - frames off) over K, its intercept the added time
per call.

Analysis: a trace of 1 M events that are all graph calls and probes (the worst case for the join: an op
event costs it nothing), summarised with `summarize_files` as a whole, and the join alone
(`analyze.breaks.frame_tables` on its rows).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import polars as pl
import torch
from common.results import publish

import dynascope

torch.set_num_threads(1)

TEMPLATE = """
@torch.compiler.disable
def noop(x):
    return x

def fn(x):
{body}    return x
"""


def make(breaks: int, tag: str):
    """A function with `breaks` graph breaks, with a code object of its own."""
    body = "".join(f"    x = x + {k}\n    x = noop(x)\n" for k in range(breaks))
    namespace = {"torch": torch}
    exec(compile(TEMPLATE.format(body=body), f"<bench_breaks {tag} {breaks}>", "exec"), namespace)
    return namespace["fn"]


def per_call_us(fn, x, calls: int) -> tuple[float, float]:
    """(wall, this thread's CPU time) per call, in µs."""
    start, cpu = time.perf_counter_ns(), time.thread_time_ns()
    for _ in range(calls):
        fn(x)
    return (time.perf_counter_ns() - start) / calls / 1000, (time.thread_time_ns() - cpu) / calls / 1000


def measure_run(args, workdir: str) -> list[dict]:
    path = os.path.join(workdir, "b.pfw.gz")
    x = torch.randn(8)
    variants = {}
    for k in args.breaks:
        variants[("untraced", k)] = torch.compile(make(k, "u"), backend="aot_eager")
        variants[("untraced", k)](x)
    for mode, frames in (("frames off", False), ("frames on", True)):
        with dynascope.session(path, frame_events=frames):
            for k in args.breaks:
                compiled = torch.compile(make(k, mode), backend=dynascope.backend())
                compiled(x)
                compiled(x)  # the first run of each cache entry is a warm-up
                variants[(mode, k)] = compiled
    times: dict[tuple, list[float]] = {key: [] for key in variants}
    cpu: dict[tuple, list[float]] = {key: [] for key in variants}
    order = list(variants)
    for repeat in range(args.repeats):
        for key in order if repeat % 2 == 0 else reversed(order):
            session = dynascope.session(path) if key[0] != "untraced" else None
            wall, thread = per_call_us(variants[key], x, args.calls)
            times[key].append(wall)
            cpu[key].append(thread)
            if session:
                session.finalize()
    rows = []
    for k in args.breaks:
        u, off, on = (statistics.median(times[(m, k)]) for m in ("untraced", "frames off", "frames on"))
        # paired: each repeat's frames-on block against the frames-off block next to it (the machine's load
        # drifts between repeats, less between neighbours)
        added = statistics.median(a - b for a, b in zip(times[("frames on", k)], times[("frames off", k)], strict=True))
        added_cpu = statistics.median(a - b for a, b in zip(cpu[("frames on", k)], cpu[("frames off", k)], strict=True))
        rows.append({"breaks": k, "untraced_us": u, "frames_off_us": off, "frames_on_us": on, "added_us": added,
                     "added_cpu_us": added_cpu})  # fmt: skip
    return rows, {"per_hit_us": _slope(rows, "added_us"), "per_hit_cpu_us": _slope(rows, "added_cpu_us"),
                  "per_call_us": _intercept(rows, "added_us")}  # fmt: skip


def _slope(rows: list[dict], key: str) -> float:
    xs, ys = [r["breaks"] for r in rows], [r[key] for r in rows]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    return sum((a - mean_x) * (b - mean_y) for a, b in zip(xs, ys, strict=True)) / sum((a - mean_x) ** 2 for a in xs)


def _intercept(rows: list[dict], key: str) -> float:
    xs, ys = [r["breaks"] for r in rows], [r[key] for r in rows]
    return statistics.fmean(ys) - _slope(rows, key) * statistics.fmean(xs)


def synthetic_trace(path: str, events: int, ops_per_graph: int = 0) -> int:
    """A trace of `events` events: calls of a function with one graph break (call, frame and resume
    probes and two graph calls: 8 events a call), each graph call with `ops_per_graph` op events in the
    layout dynascope writes. Returns the events written."""
    from dynascope.trace import format as layout

    lines = ["["]
    oh = {}

    def ref(key, attrs):
        if key not in oh:
            oh[key] = len(oh) + 1
            lines.append(json.dumps({"name": "OH", "cat": "dynascope", "pid": 1, "tid": 1, "ph": "M",
                                     "args": {"value": oh[key], **attrs}}))  # fmt: skip
        return oh[key]

    frame = {"kind": "frame", "compile_id": "0/0", "function": "forward", "qualname": "M.forward", "file": "/m.py",
             "line": 10, "resume": 0, "graphs": 1, "breaks": 1, "break_line": 12, "reason": "Skip calling",
             "break_file": "/m.py", "break_at": 12, "break_code": "x = helper(x)"}  # fmt: skip
    resume = {**frame, "compile_id": "1/0", "qualname": "M.torch_dynamo_resume_in_forward_at_12", "line": 12,
              "resume": 1, "breaks": 0}  # fmt: skip
    call = {"kind": "call", "function": "forward", "qualname": "M.forward", "file": "/m.py", "line": 10}
    refs = {
        "c+": ref("c+", {**call, "probe": "enter"}), "c-": ref("c-", {**call, "probe": "exit"}),
        "f+": ref("f+", {**frame, "probe": "enter"}), "f-": ref("f-", {**frame, "probe": "exit"}),
        "r+": ref("r+", {**resume, "probe": "enter"}), "r-": ref("r-", {**resume, "probe": "exit"}),
        "g1": ref("g1", {"kind": "graph", "compile_id": "0/0", "graph": "__compiled_fn_1", "phase": "forward"}),
        "g2": ref("g2", {"kind": "graph", "compile_id": "1/0", "graph": "__compiled_fn_2", "phase": "forward"}),
    }  # fmt: skip
    line = ('{"name":"%s","cat":"%s","pid":1,"tid":1,"ph":"X","args":{"op":%d,"level":1,"p_idx":-1},'
            '"id":%d,"ts":%d,"dur":%d}')
    pattern = (("c+", 0, 0), ("f+", 5, 0), ("g1", 10, 20), ("r+", 130, 0), ("g2", 140, 20), ("r-", 165, 0),
               ("f-", 166, 0), ("c-", 170, 0))  # fmt: skip
    if ops_per_graph:
        for g in ("g1", "g2"):
            for k in range(ops_per_graph):
                ref(f"{g}op{k}", {"graph_op": refs[g], "index": k, "kind": "op", "compile_id": "0/0",
                                  "graph": "__compiled_fn_1", "phase": "forward", "layer": f"l{k}"})  # fmt: skip
    heads = [layout.head(f'"function.op{k}"', layout.OP_CAT, 1, 1, 1, 2) for k in range(ops_per_graph)]
    n, ident, t = 0, 2, 0
    while n < events:
        for key, offset, dur in pattern:
            cat = "dynamo.graph" if key.startswith("g") else "dynamo.call" if key.startswith("c") else "dynamo.frame"
            lines.append(line % (key, cat, refs[key], ident, t + offset, dur))
            graph_id = ident
            ident += 1
            n += 1
            if key.startswith("g"):
                for head in heads:
                    lines.append(head + layout.tail(graph_id, ident, t + offset, dur // max(1, ops_per_graph))[:-1])
                    ident += 1
                    n += 1
        t += 200
    with open(path, "w") as handle:
        handle.write("\n".join(lines) + "\n")
    return n


def measure_join(args, workdir: str) -> list[dict]:
    """summarize_files and the join alone on 1 M events: probes and graph calls only (the join's worst
    case), and a trace of op events with a graph-broken call every 40 ops."""
    from dynascope.analyze import breaks
    from dynascope.analyze.partial import SUMMARY_COLUMNS
    from dynascope.analyze.read.reader import read_file

    rows = []
    for label, ops in (("graph calls and probes only", 0), ("20 op events a graph call", 20)):
        path = os.path.join(workdir, f"frames-{ops}.pfw")
        n = synthetic_trace(path, args.events, ops)
        start = time.perf_counter()
        summary = dynascope.summarize_files(path)
        whole = time.perf_counter() - start
        frame, _ = read_file(path, columns=SUMMARY_COLUMNS)
        frame = frame.filter(pl.col("cat").cast(pl.String) != "dynamo")  # what the join is handed: no op events
        start = time.perf_counter()
        tables = breaks.frame_tables(frame)
        join = time.perf_counter() - start
        assert summary.graph_breaks.height == 1 and int(tables["brk"].get_column("hits").sum()) > 0
        rows.append({"trace": label, "events": n, "probe_and_graph_events": frame.height, "summarize_s": whole,
                     "join_s": join})  # fmt: skip
    return rows


def render(results: dict) -> str:
    lines = [
        f"graph-break costs, torch {results['torch']}, {results['calls']} calls x {results['repeats']} repeats",
        "",
        "| breaks a call | untraced torch.compile µs/call | traced, frame events off | traced, frame events on | added µs/call | added CPU µs/call |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for row in results["run"]:
        lines.append(f"| {row['breaks']} | {row['untraced_us']:.1f} | {row['frames_off_us']:.1f} | "
                     f"{row['frames_on_us']:.1f} | {row['added_us']:.2f} | {row['added_cpu_us']:.2f} |")  # fmt: skip
    fit = results["fit"]
    lines.append(f"Added per break hit {fit['per_hit_us']:.2f} µs wall, {fit['per_hit_cpu_us']:.2f} µs CPU of the "
                 f"program's thread (slopes); per call {fit['per_call_us']:.2f} µs (intercept).")  # fmt: skip
    lines += [
        "",
        "| trace (calls with one graph break) | events | graph calls and probes | summarize_files s | the join alone s |",
        "|---|---:|---:|---:|---:|",
    ]
    for join in results["join"]:
        lines.append(f"| {join['trace']} | {join['events']:,} | {join['probe_and_graph_events']:,} | "
                     f"{join['summarize_s']:.2f} | {join['join_s']:.2f} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "breaks.json"))
    args = parser.parse_args(argv)
    args.breaks = (1, 4, 8, 16)
    if args.quick:
        args.calls, args.repeats, args.events = 200, 3, 100_000
    from dynascope.trace import oplines

    oplines.warm_up()
    with tempfile.TemporaryDirectory() as workdir:
        rows, fit = measure_run(args, workdir)
        results = {"torch": torch.__version__, "calls": args.calls, "repeats": args.repeats, "run": rows, "fit": fit,
                   "join": measure_join(args, workdir)}  # fmt: skip
    publish(render(results), results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
