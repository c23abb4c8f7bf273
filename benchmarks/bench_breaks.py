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

import torch
from results_io import publish

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
    exec(compile(TEMPLATE.format(body=body), f"<bench_breaks {tag} {breaks}>", "exec"), namespace)  # noqa: S102
    return namespace["fn"]


def per_call_us(fn, x, calls: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn(x)
    return (time.perf_counter_ns() - start) / calls / 1000


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
    order = list(variants)
    for repeat in range(args.repeats):
        for key in order if repeat % 2 == 0 else reversed(order):
            session = dynascope.session(path) if key[0] != "untraced" else None
            times[key].append(per_call_us(variants[key], x, args.calls))
            if session:
                session.finalize()
    rows = []
    for k in args.breaks:
        u, off, on = (statistics.median(times[(m, k)]) for m in ("untraced", "frames off", "frames on"))
        rows.append({"breaks": k, "untraced_us": u, "frames_off_us": off, "frames_on_us": on, "added_us": on - off})
    xs = [r["breaks"] for r in rows]
    ys = [r["added_us"] for r in rows]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((a - mean_x) * (b - mean_y) for a, b in zip(xs, ys, strict=True)) / sum((a - mean_x) ** 2 for a in xs)
    return rows, {"per_hit_us": slope, "per_call_us": mean_y - slope * mean_x}


def synthetic_trace(path: str, events: int) -> int:
    """A trace of `events` events: calls of a function with one graph break (call, frame and resume
    probes and two graph calls: 10 events a call). Returns the events written."""
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
    n, ident, t = 0, 2, 0
    while n < events:
        for key, offset, dur in pattern:
            cat = "dynamo.graph" if key.startswith("g") else "dynamo.call" if key.startswith("c") else "dynamo.frame"
            lines.append(line % (key, cat, refs[key], ident, t + offset, dur))
            ident += 1
            n += 1
        t += 200
    with open(path, "w") as handle:
        handle.write("\n".join(lines) + "\n")
    return n


def measure_join(args, workdir: str) -> dict:
    from dynascope.analyze import breaks
    from dynascope.analyze.partial import SUMMARY_COLUMNS
    from dynascope.analyze.reader import read_file

    path = os.path.join(workdir, "frames.pfw")
    n = synthetic_trace(path, args.events)
    start = time.perf_counter()
    summary = dynascope.summarize_files(path)
    whole = time.perf_counter() - start
    frame, _ = read_file(path, columns=SUMMARY_COLUMNS)
    start = time.perf_counter()
    tables = breaks.frame_tables(frame)
    join = time.perf_counter() - start
    hits = int(tables["brk"].get_column("hits").sum())
    assert summary.graph_breaks.height == 1
    return {"events": n, "summarize_s": whole, "join_s": join, "hits": hits, "join_events_per_s": n / join}


def render(results: dict) -> str:
    lines = [
        f"graph-break costs, torch {results['torch']}, {results['calls']} calls x {results['repeats']} repeats",
        "",
        "| breaks a call | untraced torch.compile µs/call | traced, frame events off | traced, frame events on | added µs/call |",
        "|---:|---:|---:|---:|---:|",
    ]
    for row in results["run"]:
        lines.append(f"| {row['breaks']} | {row['untraced_us']:.1f} | {row['frames_off_us']:.1f} | "
                     f"{row['frames_on_us']:.1f} | {row['added_us']:.2f} |")  # fmt: skip
    fit = results["fit"]
    lines.append(f"Added per break hit {fit['per_hit_us']:.2f} µs (slope), per call {fit['per_call_us']:.2f} µs (intercept).")
    join = results["join"]
    lines += [
        "",
        "| trace | events | summarize_files s | the join alone s | join events/s |",
        "|---|---:|---:|---:|---:|",
        f"| calls with one graph break, graph calls and probes only | {join['events']:,} | {join['summarize_s']:.2f} | "
        f"{join['join_s']:.2f} | {join['join_events_per_s'] / 1e6:.2f} M |",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "breaks.json"))
    args = parser.parse_args(argv)
    args.breaks = (1, 4, 16)
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
