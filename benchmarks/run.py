"""Run every dynascope benchmark; each prints its table and writes benchmarks/results/<name>.json.

    python benchmarks/run.py                 # full runs (several minutes)
    python benchmarks/run.py --quick         # smoke run
    python benchmarks/run.py --only capture  # or: inductor, warm_cache, analysis, compile_profile, stepping, bisect, io,
                                             #     step, breaks, gpu, collectives, ranks
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--only", choices=("capture", "inductor", "warm_cache", "analysis", "compile_profile", "stepping", "bisect", "io", "step", "breaks",
                                                "gpu", "collectives", "ranks"),
                        help="run one benchmark")
    parser.add_argument("--anchor-python", help="a python with pydftracer installed (see anchor_pydftracer.py)")
    args = parser.parse_args(argv)
    status = 0
    if args.only in (None, "capture"):
        import bench_capture

        extra = ["--anchor-python", args.anchor_python] if args.anchor_python else []
        status |= bench_capture.main((["--quick"] if args.quick else []) + extra)
    if args.only in (None, "inductor"):
        import bench_inductor

        status |= bench_inductor.main(["--quick"] if args.quick else [])
    if args.only in (None, "warm_cache"):
        import bench_warm_cache

        status |= bench_warm_cache.main(["--quick"] if args.quick else [])
    if args.only in (None, "analysis"):
        import bench_analysis

        status |= bench_analysis.main(["--events", "1000000"] if args.quick else [])
    if args.only in (None, "compile_profile"):
        import bench_compile_profile

        status |= bench_compile_profile.main(["--quick"] if args.quick else [])
    if args.only in (None, "stepping"):
        import bench_stepping

        status |= bench_stepping.main(["--quick"] if args.quick else [])
    if args.only in (None, "bisect"):
        import bench_bisect

        status |= bench_bisect.main(["--quick"] if args.quick else [])
    if args.only in (None, "io"):
        import bench_io

        status |= bench_io.main(["--quick"] if args.quick else [])
    if args.only in (None, "step"):
        import bench_step

        status |= bench_step.main(["--quick"] if args.quick else [])
    if args.only in (None, "breaks"):
        import bench_breaks

        status |= bench_breaks.main(["--quick"] if args.quick else [])
    if args.only in (None, "gpu"):
        import bench_gpu

        status |= bench_gpu.main(["--quick"] if args.quick else [])  # says so and stops without CUDA
    if args.only in (None, "collectives"):
        import bench_collectives

        status |= bench_collectives.main(["--quick"] if args.quick else [])
    if args.only in (None, "ranks"):
        import bench_ranks

        status |= bench_ranks.main(["--quick"] if args.quick else [])
    return status


if __name__ == "__main__":
    sys.exit(main())
