"""Run every dynascope benchmark; each prints its table and writes benchmarks/results/<name>.json.

    python benchmarks/run.py                 # full runs (several minutes)
    python benchmarks/run.py --quick         # smoke run
    python benchmarks/run.py --only capture  # one of them (listed below, from BENCHMARKS)
    python benchmarks/run.py --markdown      # run nothing: the latest results as docs/performance.md's tables

Layout: each benchmark is benchmarks/bench_<name>.py (also runnable on its own, `main(argv)`);
common/ is what they share (writing results, docs/performance.md's tables), fixtures/ their inputs (planted
bugs, the minifier's script), gpu_validation/ the GPU checks (validate_gpu.py, gpu_check.sh), and
results/ their JSON.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NamedTuple


class Benchmark(NamedTuple):
    name: str  # what --only takes
    module: str  # benchmarks/<module>.py, whose main(argv) runs it and returns its exit status
    description: str
    quick: tuple[str, ...] = ("--quick",)  # its arguments under --quick


BENCHMARKS = [
    Benchmark("capture", "bench_capture", "per-op tracing overhead and trace size; pydftracer and torch.profiler anchors"),
    Benchmark("inductor", "bench_inductor", "kernel-level tracing under inductor: step and compile time"),
    Benchmark("warm_cache", "bench_warm_cache", "a warm-cache run under `dynascope run` against the plain run"),
    Benchmark("analysis", "bench_analysis", "read + summarise throughput and peak memory on a large trace",
              quick=("--events", "1000000")),
    Benchmark("compile_profile", "bench_compile_profile", "compile time with dynascope.compile_profile() on"),
    Benchmark("stepping", "bench_stepping", "run time of decompiled code installed by stepping mode"),
    Benchmark("bisect", "bench_bisect", "backend bisect against torch's minifier, on planted bugs"),
    Benchmark("io", "bench_io", "time tracing adds to each raw Python file call"),
    Benchmark("step", "bench_step", "cost of the whole-step events, per event and per training step"),
    Benchmark("breaks", "bench_breaks", "run time per graph break hit, and the analysis time of the join"),
    Benchmark("gpu", "bench_gpu", "cost of device time and kernel coverage (says so and stops without CUDA)"),
    Benchmark("collectives", "bench_collectives", "time added per collective and to a compiled DDP step"),
    Benchmark("memory", "bench_memory", "memory accounting: a reading, per graph call, per demo step, compile time"),
    Benchmark("ranks", "bench_ranks", "the job-wide report over many synthetic rank traces, serial and on Dask"),
]


def main(argv: list[str] | None = None) -> int:
    listing = "\n".join(f"  {b.name:<16} {b.module}.py: {b.description}" for b in BENCHMARKS)
    parser = argparse.ArgumentParser(description=__doc__, epilog="benchmarks:\n" + listing,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--only", choices=[b.name for b in BENCHMARKS], help="run one benchmark")
    parser.add_argument("--anchor-python", help="a python with pydftracer installed (see anchor_pydftracer.py)")
    parser.add_argument("--markdown", action="store_true",
                        help="run nothing: print the latest results/*.json as docs/performance.md's markdown tables")
    args = parser.parse_args(argv)
    if args.markdown:
        from common import markdown

        return markdown.main()
    status = 0
    for bench in BENCHMARKS:
        if args.only not in (None, bench.name):
            continue
        argv_ = list(bench.quick) if args.quick else []
        if bench.name == "capture" and args.anchor_python:
            argv_ += ["--anchor-python", args.anchor_python]
        # benchmarks/ is sys.path[0] when this file runs as a script: the modules import as top-level names
        status |= importlib.import_module(bench.module).main(argv_)
    return status


if __name__ == "__main__":
    sys.exit(main())
