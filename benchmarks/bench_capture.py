"""Tracing overhead and trace size on the issue's model: 20 x (Linear(16,16), ReLU), batch 8, CPU, 1 thread.

Every figure is a difference or ratio against plain torch.compile measured in the same run
(backend "eager" for autograd=False, "aot_eager" for autograd=True), with traced and untraced
repeats interleaved so that machine noise hits both alike. Timing: best of `--best` runs of
`--calls` calls, median over `--repeats` repeats.
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
from common.results import publish

import dynascope
from dynascope.trace import buffers


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(20):
        layers += [torch.nn.Linear(16, 16), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


CASES = [
    # name, grad enabled, run backward, autograd (AOT) tracing
    ("no_grad forward, Dynamo graph", False, False, False),
    ("no_grad forward, AOT graphs", False, False, True),
    ("grad forward, AOT graphs", True, False, True),
    ("grad forward+backward, AOT graphs", True, True, True),
]


class Loop:
    """A compiled model and the loop the case times."""

    def __init__(self, backend, grad: bool, backward: bool) -> None:
        self.model = torch.compile(make_model(), backend=backend)
        self.x = torch.randn(8, 16)
        self.grad, self.backward = grad, backward
        self.run(20)  # compile and warm up

    def run(self, calls: int) -> float:
        context = torch.enable_grad() if self.grad else torch.no_grad()
        model, x, backward = self.model, self.x, self.backward
        with context:
            start = time.perf_counter()
            for _ in range(calls):
                y = model(x)
                if backward:
                    y.sum().backward()
            return time.perf_counter() - start


def best_of(loop: Loop, calls: int, best: int) -> float:
    return min(loop.run(calls) for _ in range(best)) / calls


def discard_buffers() -> None:
    for buffer in buffers.registered():
        buffers.take(buffer)


def count_readings(loop: Loop) -> tuple[int, int]:
    """(op readings, graph calls) for one call of the loop."""
    discard_buffers()
    loop.run(1)
    readings = [r for b in buffers.registered() for r in buffers.take(b) if isinstance(r, int)]
    calls = sum(1 for r in readings if r < 0)
    return len(readings) - 2 * calls, calls


def measure_case(name, grad, backward, autograd, args, workdir) -> dict:
    torch._dynamo.reset()
    baseline_backend = "aot_eager" if autograd else "eager"
    baseline = Loop(baseline_backend, grad, backward)
    disabled = Loop(dynascope.backend(autograd=autograd, enable=False), grad, backward)
    # hot path: the session records, the writer is idle (long interval), buffers are discarded
    session = dynascope.session(os.path.join(workdir, "hot.pfw.gz"), flush_interval_s=3600)
    traced = Loop(dynascope.backend(autograd=autograd), grad, backward)
    ops, calls = count_readings(traced)
    base_t, traced_t, disabled_t = [], [], []
    for _ in range(args.repeats):
        base_t.append(best_of(baseline, args.calls, args.best))
        discard_buffers()
        traced_t.append(best_of(traced, args.calls, args.best))
        discard_buffers()
        disabled_t.append(best_of(disabled, args.calls, args.best))
    session.finalize()
    base, hot, off = statistics.median(base_t), statistics.median(traced_t), statistics.median(disabled_t)

    # end to end: a normal session; time from open to finalize done, all formatting and gzip included
    path_prefix = os.path.join(workdir, "full")
    end_to_end, sizes = [], []
    for _ in range(args.repeats):
        base_total = min(baseline.run(args.calls) for _ in range(args.best))
        totals = []
        for _ in range(args.best):
            started = time.perf_counter()
            with dynascope.session(path_prefix + ".pfw.gz") as full:
                traced.run(args.calls)
            totals.append(time.perf_counter() - started)
            sizes.append(os.path.getsize(full.path) / (args.calls * ops))
            written = full.events_written
            os.remove(full.path)
        end_to_end.append((min(totals) - base_total) / (args.calls * ops) * 1e6)
    return {
        "case": name,
        "baseline_backend": baseline_backend,
        "ops_per_call": ops,
        "graph_calls_per_call": calls,
        "baseline_us_per_call": base * 1e6,
        "traced_us_per_call": hot * 1e6,
        "hot_path_us_per_op": (hot - base) / ops * 1e6,
        "end_to_end_us_per_op": statistics.median(end_to_end),
        "disabled_ratio": off / base,
        "gz_bytes_per_op_event": statistics.median(sizes),
        "events_per_run": written,
    }


def writer_throughput(args, workdir) -> dict:
    """Events per second through decode + format + gzip + write, fed by a recorded hot loop."""
    torch._dynamo.reset()
    session = dynascope.session(os.path.join(workdir, "writer.pfw.gz"), flush_interval_s=3600)
    loop = Loop(dynascope.backend(autograd=True), True, True)
    discard_buffers()
    loop.run(args.calls * 5)
    before = session.events_written
    started = time.perf_counter()
    session.flush()
    elapsed = time.perf_counter() - started
    events = session.events_written - before
    session.finalize()
    return {"events": events, "seconds": elapsed, "events_per_s": events / elapsed if elapsed else 0.0}


def profiler_anchor(args) -> dict:
    """torch.profiler on the same forward loop, for scale: per-op cost in the loop and at stop."""
    torch._dynamo.reset()
    loop = Loop("aot_eager", False, False)
    base = best_of(loop, args.calls, args.best)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        started = time.perf_counter()
        loop.run(args.calls)
        in_loop = time.perf_counter() - started
        stop_started = time.perf_counter()
    stop = time.perf_counter() - stop_started
    events = sum(1 for e in prof.events() if e.name.startswith("aten::"))
    ops = max(events // args.calls, 1)
    return {
        "ops_per_call": ops,
        "in_loop_us_per_op": (in_loop / args.calls - base) / ops * 1e6,
        "at_stop_us_per_op": stop / (args.calls * ops) * 1e6,
    }


def pydftracer_anchor(python: str) -> dict | None:
    """Run anchor_pydftracer.py under another interpreter (a venv with pydftracer)."""
    import subprocess

    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "anchor_pydftracer.py")
    result = subprocess.run([python, script], capture_output=True, check=False, text=True, env={**os.environ, "DFTRACER_ENABLE": "1"})
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        print(f"pydftracer anchor failed: {result.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    return json.loads(lines[-1])


def render(results: dict) -> str:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="dynascope tracing overhead (20 x Linear(16,16)+ReLU, batch 8, 1 thread)")
    for column in ("case", "ops/call", "baseline µs/call", "hot path µs/op", "end-to-end µs/op",
                   "disabled vs untraced", "gz B/op event"):  # fmt: skip
        table.add_column(column, justify="left" if column == "case" else "right")
    for row in results["cases"]:
        table.add_row(
            f"{row['case']} (vs {row['baseline_backend']})",
            str(row["ops_per_call"]),
            f"{row['baseline_us_per_call']:.1f}",
            f"{row['hot_path_us_per_op']:.3f}",
            f"{row['end_to_end_us_per_op']:.3f}",
            f"{(row['disabled_ratio'] - 1) * 100:+.1f}%",
            f"{row['gz_bytes_per_op_event']:.1f}",
        )
    console = Console(width=140, record=True)
    console.print(table)
    writer = results["writer"]
    console.print(f"writer throughput: {writer['events_per_s'] / 1e6:.2f} M events/s "
                  f"({writer['events']} events in {writer['seconds'] * 1e3:.0f} ms: decode, format, gzip, write)")  # fmt: skip
    pyd = results.get("pydftracer")
    if pyd:
        console.print(f"pydftracer {pyd.get('version', '')} on the same model (no_grad forward, AOT): "
                      f"{pyd['us_per_op']:.2f} µs/op (its own venv, same machine, same run)")  # fmt: skip
    anchor = results.get("torch_profiler")
    if anchor:
        console.print(f"torch.profiler on the same loop: {anchor['in_loop_us_per_op']:.2f} µs/op in the loop, "
                      f"{anchor['at_stop_us_per_op']:.2f} µs/op when it stops")  # fmt: skip
    return console.export_text()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--best", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="fewer repeats, for a smoke run")
    parser.add_argument("--anchor-python", help="a python with pydftracer installed, to measure it in the same run")
    parser.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results", "capture.json"))
    args = parser.parse_args(argv)
    if args.quick:
        args.calls, args.best, args.repeats = 200, 2, 2
    torch.set_num_threads(1)
    results: dict = {"torch": torch.__version__, "python": sys.version.split()[0], "calls": args.calls,
                     "best_of": args.best, "repeats": args.repeats, "cases": []}  # fmt: skip
    with tempfile.TemporaryDirectory() as workdir:
        for case in CASES:
            results["cases"].append(measure_case(*case, args, workdir))
        results["writer"] = writer_throughput(args, workdir)
    results["torch_profiler"] = profiler_anchor(args)
    if args.anchor_python:
        results["pydftracer"] = pydftracer_anchor(args.anchor_python)
    publish(render(results), results, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
