"""Stepping mode: a compiled function's run time with decompiled code installed (`dynascope.stepping`)
against the same function running Dynamo's own bytecode, in the same run.

Each case's function is defined twice from the same source (two code objects, so two separate Dynamo
caches): one compiled plainly, one compiled under stepping. Calls of the two alternate, so machine
noise hits both alike. Timing: best of `--best` runs of `--calls` calls, median over `--repeats`.
Small tensors on purpose: the less the graph costs, the more the transformed code's own Python shows.
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

import dynascope

SOURCE = '''
import torch

def graph_break_and_branch(a, b):
    x = a / (torch.abs(a) + 1)
    print_like(x)
    if b.sum() < 0:
        b = b * -1
    return x * b

def side_effects(x, log):
    y = x.sin()
    log.append(y)  # a side effect Dynamo replays after the graph
    torch._dynamo.graph_break()
    z = log.pop().cos()
    return z + y

def mlp(model, x):
    return model(x)

def print_like(x):
    torch._dynamo.graph_break()
'''


def _define() -> dict:
    namespace: dict = {}
    exec(compile(SOURCE, "<bench_stepping>", "exec"), namespace)
    return namespace


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(20):
        layers += [torch.nn.Linear(16, 16), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def _cases():
    a, b = torch.randn(8), -torch.rand(8) - 0.1
    model, x = _model(), torch.randn(8, 16)
    return [
        ("graph break + data-dependent branch (4 frames)", "graph_break_and_branch", lambda: (a, b)),
        ("replayed side effects across a graph break (2 frames)", "side_effects", lambda: (a, [])),
        ("20 x (Linear, ReLU), batch 8 (1 frame)", "mlp", lambda: (model, x)),
    ]


def _time(fn, args_of, calls: int) -> float:
    args = args_of()
    start = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    return time.perf_counter() - start


def measure(name: str, fn_name: str, args_of, args: argparse.Namespace, out_dir: str) -> dict:
    plain = torch.compile(_define()[fn_name], backend="eager")
    with dynascope.stepping(out_dir) as stepping:
        stepped = torch.compile(_define()[fn_name], backend="eager")
        for _ in range(3):
            stepped(*args_of())  # compiles every frame under stepping
    for _ in range(3):
        plain(*args_of())
    for _ in range(2):  # warm up both (caches, allocator) before anything is timed
        _time(plain, args_of, args.calls)
        _time(stepped, args_of, args.calls)
    ratios, plain_us, stepped_us = [], [], []
    for _ in range(args.repeats):
        p = s = float("inf")
        for _ in range(args.best):
            p = min(p, _time(plain, args_of, args.calls))
            s = min(s, _time(stepped, args_of, args.calls))
        ratios.append(s / p)
        plain_us.append(p / args.calls * 1e6)
        stepped_us.append(s / args.calls * 1e6)
    return {
        "case": name,
        "frames": len(stepping.results),
        "installed": len(stepping.installed),
        "dynamo_us_per_call": statistics.median(plain_us),
        "stepping_us_per_call": statistics.median(stepped_us),
        "ratio": statistics.median(ratios),
    }


def render(results: dict) -> str:
    lines = [
        (f"torch {results['torch']}, Python {results['python']}, {results['calls']} calls, best of "
         f"{results['best']}, median of {results['repeats']}:"),
        "",
        "| case | frames run decompiled | Dynamo's bytecode µs/call | decompiled µs/call | ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in results["cases"]:
        lines.append(f"| {row['case']} | {row['installed']}/{row['frames']} | {row['dynamo_us_per_call']:.1f} "
                     f"| {row['stepping_us_per_call']:.1f} | {row['ratio']:.3f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--best", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="200 calls, best of 2, median of 3")
    parser.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results", "stepping.json"))
    args = parser.parse_args(argv)
    if args.quick:
        args.calls, args.best, args.repeats = 200, 2, 3
    torch.set_num_threads(1)
    results: dict = {"torch": torch.__version__, "python": sys.version.split()[0], "calls": args.calls,
                     "best": args.best, "repeats": args.repeats, "cases": []}
    with tempfile.TemporaryDirectory() as out_dir:
        for name, fn_name, args_of in _cases():
            results["cases"].append(measure(name, fn_name, args_of, args, out_dir))
    print(render(results))
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as fh:
        json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
