"""Kernel-level tracing under inductor: step time, compile time and a torch.profiler anchor, CPU, 1 thread.

Two training steps (forward + backward), each compiled twice in the same run: untraced with plain
`torch.compile(model)` (backend "inductor") and traced with `dynascope.backend(inner="inductor")`,
which times every call in inductor's generated wrapper (C++ kernels, extern kernels, fallback ops):

  - the 20 x (Linear(16,16), ReLU) model of bench_capture.py, batch 8, `y.sum().backward()`;
  - the demo ConvNet, batch 16 of 1x28x28, cross-entropy loss, backward and an SGD step.

Step times: traced and untraced repeats interleaved, best of `--best` runs of `--calls` steps (a fifth
of that for the ConvNet, whose step takes ~8x longer), median over `--repeats` repeats (as
bench_capture.py). Compile times: the first step (forward and backward
compile) of a fresh model after torch._dynamo.reset(), in a fresh inductor cache directory with
in-memory caches cleared (cold), then again in that directory (warm: inductor's caches hit), traced
and untraced interleaved, median over `--compile-repeats`, after one discarded warm-up round.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from bench_capture import discard_buffers, make_model
from common.results import publish

import dynascope
from dynascope.trace import buffers

TARGETS = {"hot_path_us_per_kernel": 0.5, "step_ratio": 0.05, "compile_ratio": 0.10}


def linear_step(compile_: Callable) -> Callable[[], None]:
    model = compile_(make_model())
    x = torch.randn(8, 16)

    def step() -> None:
        model(x).sum().backward()

    return step


def convnet_step(compile_: Callable) -> Callable[[], None]:
    from dynascope.demo.train import ConvNet

    torch.manual_seed(0)
    net = ConvNet()
    model = compile_(net)
    optimizer = torch.optim.SGD(net.parameters(), lr=1e-3)
    images, labels = torch.randn(16, 1, 28, 28), torch.randint(0, 10, (16,))

    def step() -> None:
        optimizer.zero_grad()
        F.cross_entropy(model(images), labels).backward()
        optimizer.step()

    return step


MODELS = [
    # name, step factory, steps per timed run as a fraction of --calls (a ConvNet step takes ~8x longer)
    ("20 x Linear(16,16)+ReLU, batch 8", linear_step, 1),
    ("demo ConvNet, batch 16, + SGD step", convnet_step, 5),
]


def untraced(**options) -> Callable:
    """torch.compile with backend "inductor" (options: inductor config, as torch.compile takes them)."""
    return lambda model: torch.compile(model, options=options or None)


def traced() -> Callable:
    return lambda model: torch.compile(model, backend=dynascope.backend(inner="inductor"))


class Loop:
    """One compiled training step and the loop that times it."""

    def __init__(self, factory, compile_: Callable) -> None:
        self.step = factory(compile_)
        self.run(20)  # compile and warm up

    def run(self, calls: int) -> float:
        step = self.step
        start = time.perf_counter()
        for _ in range(calls):
            step()
        return time.perf_counter() - start


def best_of(loop: Loop, calls: int, best: int) -> float:
    return min(loop.run(calls) for _ in range(best)) / calls


def count_kernels(loop: Loop) -> tuple[int, int]:
    """(kernel readings, graph calls) for one step, from the trace buffers."""
    discard_buffers()
    loop.run(1)
    readings = [r for b in buffers.registered() for r in buffers.take(b) if isinstance(r, int)]
    calls = sum(1 for r in readings if r < 0)
    return len(readings) - 2 * calls, calls


def measure_steps(factory, args, workdir) -> dict:
    torch._dynamo.reset()
    baseline = Loop(factory, untraced())
    # hot path: the session records, the writer is idle (long interval), buffers are discarded
    session = dynascope.session(os.path.join(workdir, "hot.pfw.gz"), flush_interval_s=3600)
    traced_loop = Loop(factory, traced())
    kernels, calls = count_kernels(traced_loop)
    base_t, traced_t = [], []
    for _ in range(args.repeats):
        base_t.append(best_of(baseline, args.calls, args.best))
        discard_buffers()
        traced_t.append(best_of(traced_loop, args.calls, args.best))
        discard_buffers()
    session.finalize()
    base, hot = statistics.median(base_t), statistics.median(traced_t)

    # end to end: a normal session; time from open to finalize done, all formatting and gzip included
    path = os.path.join(workdir, "full.pfw.gz")
    end_to_end = []
    for _ in range(args.repeats):
        base_total = min(baseline.run(args.calls) for _ in range(args.best))
        totals = []
        for _ in range(args.best):
            started = time.perf_counter()
            with dynascope.session(path) as full:
                traced_loop.run(args.calls)
            totals.append(time.perf_counter() - started)
            written = full.events_written
            os.remove(full.path)
        end_to_end.append((min(totals) - base_total) / (args.calls * kernels) * 1e6)
    empty = []  # what a session costs with nothing in it: open, writer thread, finalize
    for _ in range(args.best):
        started = time.perf_counter()
        with dynascope.session(path) as full:
            pass
        empty.append(time.perf_counter() - started)
        os.remove(full.path)
    return {
        "kernels_per_step": kernels,
        "graph_calls_per_step": calls,
        "untraced_us_per_step": base * 1e6,
        "traced_us_per_step": hot * 1e6,
        "hot_path_us_per_kernel": (hot - base) / kernels * 1e6,
        "step_ratio": hot / base - 1,
        "end_to_end_us_per_kernel": statistics.median(end_to_end),
        "events_per_run": written,
        "empty_session_ms": min(empty) * 1e3,
        "untraced_us_all": [t * 1e6 for t in base_t],
        "traced_us_all": [t * 1e6 for t in traced_t],
    }


def compile_once(factory, traced_: bool, workdir: str) -> tuple[float, float]:
    """(wall, this process's CPU) seconds from torch.compile to the end of the first step (forward and
    backward compile). The CPU time leaves out the compile workers' C++ compiles (the same kernels either
    way) and the time other machines' work takes from this one, so it shows the added work steadily."""
    from torch._inductor.utils import clear_caches

    torch._dynamo.reset()
    clear_caches()  # inductor's in-memory caches, as in a new process
    gc.collect()  # else a full collection (~0.3 s here) falls into some compiles and not others
    session = dynascope.session(os.path.join(workdir, "compile.pfw.gz"), flush_interval_s=3600) if traced_ else None
    started, cpu_started = time.perf_counter(), time.process_time()
    step = factory(traced() if traced_ else untraced())
    step()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    if session is not None:
        session.finalize()
    return elapsed, cpu


def measure_compile(factory, args, workdir) -> dict:
    """Cold and warm-cache compile, traced and untraced interleaved, each pair in a fresh cache directory.

    Warm compiles, traced and untraced, are served by AOTAutograd's cache (a traced hit is instrumented
    from dynascope's record beside the cache); the untraced warm compile is also timed with that cache
    off, as traced compiles ran before they used it. bench_warm_cache.py measures whole warm runs."""
    import torch._functorch.config as functorch_config
    from torch._inductor.utils import fresh_cache

    names = ("untraced_cold", "traced_cold", "untraced_warm", "traced_warm", "untraced_warm_no_aot_cache")
    times: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {"untraced_cold": [], "traced_cold": []}
    for repeat in range(args.compile_repeats + 1):  # the first round warms compile workers and imports
        for variant in ("untraced", "traced"):
            with fresh_cache(dir=tempfile.mkdtemp(dir=workdir)):
                measured = {f"{variant}_cold": compile_once(factory, variant == "traced", workdir),
                            f"{variant}_warm": compile_once(factory, variant == "traced", workdir)}  # fmt: skip
                if variant == "untraced":
                    with functorch_config.patch(enable_autograd_cache=False):
                        measured["untraced_warm_no_aot_cache"] = compile_once(factory, False, workdir)
            if repeat:
                for name, (seconds, cpu_seconds) in measured.items():
                    times[name].append(seconds)
                    if name in cpu:
                        cpu[name].append(cpu_seconds)
    torch._dynamo.reset()
    med = {f"{k}_s": statistics.median(v) for k, v in times.items()}
    med.update({f"{k}_cpu_s": statistics.median(v) for k, v in cpu.items()})
    return {
        **med,
        "cold_cpu_ratio": med["traced_cold_cpu_s"] / med["untraced_cold_cpu_s"] - 1,
        "cold_ratio": med["traced_cold_s"] / med["untraced_cold_s"] - 1,
        "warm_ratio": med["traced_warm_s"] / med["untraced_warm_s"] - 1,
        "warm_ratio_no_aot_cache": med["traced_warm_s"] / med["untraced_warm_no_aot_cache_s"] - 1,
        "all_s": times,
        "all_cpu_s": cpu,
    }


def profiler_anchor(factory, args) -> dict:
    """torch.profiler on the same step, compiled with inductor's per-kernel profiling (C++ kernels record
    themselves): cost per step and per kernel event in the loop, and the time it takes to stop."""
    from torch.profiler import ProfilerActivity, profile

    torch._dynamo.reset()
    plain = Loop(factory, untraced())
    # its own compile options: a model compiled alike would reuse the plain model's compiled code
    loop = Loop(factory, untraced(**{"cpp.enable_kernel_profile": True}))
    plain_t, base_t = [], []
    for _ in range(args.repeats):
        plain_t.append(best_of(plain, args.calls, args.best))
        base_t.append(best_of(loop, args.calls, args.best))
    base = statistics.median(base_t)
    in_loops, stops, events = [], [], None
    for _ in range(args.best):  # best of: one profiled run is as exposed to the machine's noise as any
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            started = time.perf_counter()
            loop.run(args.calls)
            in_loops.append(time.perf_counter() - started)
            stop_started = time.perf_counter()
        stops.append(time.perf_counter() - stop_started)
        events = events or prof.events()
    in_loop, stop = min(in_loops), statistics.median(stops)
    # a kernel event is one call of the wrapper: a direct child of inductor's "## Call CompiledFxGraph" event
    wrappers = {id(e) for e in events if e.name.startswith("## Call CompiledFxGraph")}
    kernel_events = sum(1 for e in events if e.cpu_parent is not None and id(e.cpu_parent) in wrappers)
    if not wrappers:  # no parent links: count the generated kernels and ATen ops
        kernel_events = sum(1 for e in events if "cpp_fused" in e.name or e.name.startswith("aten::"))
    generated = sum(1 for e in events if "cpp_fused" in e.name)
    per_step = (in_loop / args.calls - base) * 1e6
    return {
        "plain_us_per_step": statistics.median(plain_t) * 1e6,
        "kernel_profile_us_per_step": base * 1e6,
        "events_per_step": len(events) / args.calls,
        "kernel_events_per_step": kernel_events / args.calls,
        "generated_kernel_events_per_step": generated / args.calls,
        "in_loop_us_per_step": per_step,
        "in_loop_us_per_kernel_event": per_step / max(kernel_events / args.calls, 1),
        "at_stop_ms": stop * 1e3,
        "at_stop_us_per_kernel_event": stop / max(kernel_events, 1) * 1e6,
        "in_loop_us_per_event": per_step / max(len(events) / args.calls, 1),
        "at_stop_us_per_event": stop / max(len(events), 1) * 1e6,
    }


def render(results: dict) -> str:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="dynascope kernel-level tracing under inductor (training step, CPU, 1 thread)")
    for column in ("model", "kernels/step", "untraced µs/step", "traced µs/step", "hot path µs/kernel",
                   "step time", "end-to-end µs/kernel", "cold compile", "warm compile"):  # fmt: skip
        table.add_column(column, justify="left" if column == "model" else "right")
    for row in results["models"]:
        compile_ = row["compile"]
        table.add_row(
            row["model"],
            str(row["kernels_per_step"]),
            f"{row['untraced_us_per_step']:.1f}",
            f"{row['traced_us_per_step']:.1f}",
            f"{row['hot_path_us_per_kernel']:.3f}",
            f"{row['step_ratio'] * 100:+.1f}%",
            f"{row['end_to_end_us_per_kernel']:.3f}",
            f"{compile_['untraced_cold_s']:.2f} → {compile_['traced_cold_s']:.2f} s ({compile_['cold_ratio'] * 100:+.0f}%)",
            f"{compile_['untraced_warm_s']:.2f} → {compile_['traced_warm_s']:.2f} s ({compile_['warm_ratio'] * 100:+.0f}%)",
        )
    console = Console(width=160, record=True)
    console.print(table)
    for row in results["models"]:
        prof = row["torch_profiler"]
        console.print(f"torch.profiler, {row['model']} (cpp.enable_kernel_profile): {prof['kernel_events_per_step']:.0f} "
                      f"kernel events/step ({prof['generated_kernel_events_per_step']:.0f} generated C++ kernels, "
                      f"{prof['events_per_step']:.0f} events in all); {prof['in_loop_us_per_step']:.0f} µs/step in the loop "
                      f"= {prof['in_loop_us_per_kernel_event']:.2f} µs/kernel event ({prof['in_loop_us_per_event']:.2f} µs/event), "
                      f"plus {prof['at_stop_ms']:.0f} ms to stop ({prof['at_stop_us_per_kernel_event']:.2f} µs/kernel event, "
                      f"{prof['at_stop_us_per_event']:.2f} µs/event)")  # fmt: skip
    for row in results["models"]:
        compile_ = row["compile"]
        console.print(f"cold compile, {row['model']}: this process's CPU {compile_['untraced_cold_cpu_s']:.2f} → "
                      f"{compile_['traced_cold_cpu_s']:.2f} s ({compile_['cold_cpu_ratio'] * 100:+.0f}%)")  # fmt: skip
        console.print(f"warm compile, {row['model']}: untraced with AOTAutograd's cache off (as traced runs) "
                      f"{compile_['untraced_warm_no_aot_cache_s']:.2f} s, traced {compile_['warm_ratio_no_aot_cache'] * 100:+.0f}% "
                      "against that")  # fmt: skip
    targets = results["targets"]
    console.print(f"targets: ≤ {targets['hot_path_us_per_kernel']} µs per kernel call, step time within "
                  f"{targets['step_ratio'] * 100:.0f}%, compile time within {targets['compile_ratio'] * 100:.0f}%")  # fmt: skip
    return console.export_text()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--best", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--compile-repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="fewer steps and repeats, for a smoke run")
    parser.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results", "inductor.json"))
    args = parser.parse_args(argv)
    if args.quick:
        args.calls, args.best, args.repeats, args.compile_repeats = 100, 2, 2, 1
    torch.set_num_threads(1)
    results: dict = {"torch": torch.__version__, "python": sys.version.split()[0], "calls": args.calls,
                     "best_of": args.best, "repeats": args.repeats, "compile_repeats": args.compile_repeats,
                     "targets": TARGETS, "models": []}  # fmt: skip
    with tempfile.TemporaryDirectory() as workdir:
        for name, factory, fraction in MODELS:
            model_args = argparse.Namespace(**{**vars(args), "calls": max(args.calls // fraction, 10)})
            row = {"model": name, "calls": model_args.calls, **measure_steps(factory, model_args, workdir)}
            row["torch_profiler"] = profiler_anchor(factory, model_args)
            results["models"].append(row)
        for row, (_, factory, _) in zip(results["models"], MODELS, strict=True):
            row["compile"] = measure_compile(factory, args, workdir)
    publish(render(results), results, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
