"""What memory accounting costs (docs/memory.md): a reading of the process's memory, the time the sampler adds
to each traced graph call and to the demo's training step, and the compile time the static analysis of the
partition adds.

- Reading: one /proc/self/statm read in Python, and glibc's mallinfo2 (which walks the allocator's free
  lists, so its cost grows with the heap): why nothing is read on the hot path.
- Per graph call: a small compiled graph (dynascope's aot_eager tracing backend) called in a loop inside a
  session with the memory sampler on and off, interleaved blocks, median time per call.
- Training step: the demo's ConvNet loop (bench_step.DemoLoop, inductor, DataLoader, checkpoint), traced with
  the sampler on and off, interleaved blocks, median step time.
- Compile: a 12-layer MLP compiled with backend aot_eager under `dynascope.observe()`, the time spent in the
  partition listener (capture/graph_memory.py) against the whole compile; and the compile with the listener
  against the compile without it (fresh Dynamo state each time, interleaved).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import tempfile
import time

import torch
from bench_step import DemoLoop
from common.results import publish

import dynascope
from dynascope import _torch
from dynascope.capture import graph_memory as static_memory
from dynascope.demo.train import synthetic_dataset
from dynascope.explain import observe

torch.set_num_threads(1)
HERE = os.path.dirname(os.path.abspath(__file__))


def reading_costs(calls: int) -> dict:
    fd = os.open("/proc/self/statm", os.O_RDONLY)
    start = time.perf_counter_ns()
    for _ in range(calls):
        int(os.pread(fd, 64, 0).split()[1])
    statm_us = (time.perf_counter_ns() - start) / calls / 1000
    os.close(fd)

    class Mallinfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                    "fsmblks", "uordblks", "fordblks", "keepcost")]  # fmt: skip

    mallinfo2 = ctypes.CDLL(None).mallinfo2
    mallinfo2.restype = Mallinfo2
    keep = [torch.randn(100, 100) for _ in range(2000)]
    del keep[::2]  # a heap with free chunks, as a training program's is
    start = time.perf_counter_ns()
    for _ in range(calls):
        mallinfo2()
    mallinfo_us = (time.perf_counter_ns() - start) / calls / 1000
    return {"statm_read_us": statm_us, "mallinfo2_us": mallinfo_us}


def per_graph_call(args, workdir: str) -> dict:
    model = torch.compile(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()), backend=dynascope.backend())
    x = torch.randn(4, 8)
    times: dict[bool, list[float]] = {True: [], False: []}
    with torch.no_grad():
        for repeat in range(args.repeats):
            for on in (True, False) if repeat % 2 == 0 else (False, True):
                with dynascope.session(os.path.join(workdir, "calls.pfw.gz"), memory=on):
                    model(x)
                    start = time.perf_counter_ns()
                    for _ in range(args.calls):
                        model(x)
                    times[on].append((time.perf_counter_ns() - start) / args.calls / 1000)
    on, off = statistics.median(times[True]), statistics.median(times[False])
    return {"call_us_memory_on": on, "call_us_memory_off": off, "added_us_per_call": on - off}


def demo_steps(args, workdir: str) -> dict:
    dataset = synthetic_dataset(32, 16)
    times: dict[bool, list[float]] = {True: [], False: []}
    loop = DemoLoop(dynascope.backend(inner="inductor"), dataset, workdir, save_every=50)
    with dynascope.session(os.path.join(workdir, "warm.pfw.gz")):
        for _ in range(3):
            loop.step()  # compile outside the measurement
    for repeat in range(args.repeats):
        for on in (True, False) if repeat % 2 == 0 else (False, True):
            with dynascope.session(os.path.join(workdir, "steps.pfw.gz"), memory=on):
                for _ in range(2):
                    loop.step()
                for _ in range(args.steps):
                    start = time.perf_counter_ns()
                    loop.step()
                    times[on].append((time.perf_counter_ns() - start) / 1e6)
    on, off = statistics.median(times[True]), statistics.median(times[False])
    return {"step_ms_memory_on": on, "step_ms_memory_off": off, "ratio": on / off}


def compile_cost(args) -> dict:
    def mlp() -> torch.nn.Module:
        layers: list[torch.nn.Module] = []
        for _ in range(12):
            layers += [torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.LayerNorm(256)]
        return torch.nn.Sequential(*layers)

    x = torch.randn(64, 256)
    spent: list[float] = []
    real = static_memory.graph_memory

    def timed(*a, **k):
        start = time.perf_counter_ns()
        try:
            return real(*a, **k)
        finally:
            spent.append((time.perf_counter_ns() - start) / 1e6)

    static_memory.graph_memory = timed
    with_listener, without = [], []
    with observe():
        torch.compile(mlp(), backend="aot_eager")(x).sum().backward()  # warm: imports, first-compile caches
    spent.clear()
    try:
        for repeat in range(args.compiles):
            for listen in (True, False) if repeat % 2 == 0 else (False, True):
                torch._dynamo.reset()
                model = mlp()
                start = time.perf_counter_ns()
                listener = _torch.on_partition
                if not listen:
                    _torch.on_partition = lambda _listener: (lambda: None)  # the same observer, no partition listener
                try:
                    with observe():
                        torch.compile(model, backend="aot_eager")(x).sum().backward()
                finally:
                    _torch.on_partition = listener
                (with_listener if listen else without).append((time.perf_counter_ns() - start) / 1e6)
    finally:
        static_memory.graph_memory = real
    compile_ms = statistics.median(with_listener)
    analysis_ms = statistics.median(spent)
    return {"compile_ms_with": compile_ms, "compile_ms_without": statistics.median(without),
            "analysis_ms": analysis_ms, "analysis_share": analysis_ms / compile_ms}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "memory.json"))
    args = parser.parse_args(argv)
    args.repeats, args.calls, args.steps, args.compiles = (4, 2000, 5, 2) if args.quick else (10, 20000, 20, 6)
    with tempfile.TemporaryDirectory() as workdir:
        results = {
            "reading": reading_costs(2000 if args.quick else 20000),
            "graph_call": per_graph_call(args, workdir),
            "demo_step": demo_steps(args, workdir),
            "compile": compile_cost(args),
        }
    r, g, d, c = results["reading"], results["graph_call"], results["demo_step"], results["compile"]
    lines = [
        "Memory accounting (docs/memory.md)",
        f"  one reading: /proc/self/statm {r['statm_read_us']:.2f} µs, mallinfo2 {r['mallinfo2_us']:.2f} µs",
        (f"  per traced graph call: {g['call_us_memory_off']:.2f} µs without the sampler, "
         f"{g['call_us_memory_on']:.2f} µs with it: {g['added_us_per_call']:+.2f} µs (target <= 1)"),
        (f"  demo step: {d['step_ms_memory_off']:.2f} ms without, {d['step_ms_memory_on']:.2f} ms with: "
         f"x{d['ratio']:.3f} (target <= 1.02)"),
        (f"  compile (12-layer MLP, aot_eager): {c['compile_ms_without']:.0f} ms without the partition's analysis, "
         f"{c['compile_ms_with']:.0f} ms with; the analysis itself {c['analysis_ms']:.1f} ms = "
         f"{100 * c['analysis_share']:.1f}% (target <= 5%)"),
    ]  # fmt: skip
    table = "\n".join(lines)
    publish(table, results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
