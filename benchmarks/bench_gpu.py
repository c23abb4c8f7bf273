"""What GPU time costs, and how much of the GPU's work it accounts for (needs CUDA; says so and stops without).

A training step of an MLP (20 x Linear(1024), batch 256), compiled with aot_eager and with inductor, run
in interleaved blocks in one process: untraced torch.compile (the baseline), traced by dynascope with
device time on (CUPTI through torch's profiler, capture/device.py), and the untraced step under
torch.profiler with CUDA activity (the anchor). Each row gives the median step and its ratio to the
baseline of the same backend, and, for the traced runs, the share of the GPU's kernel time that op or
kernel events account for (device events joined to a launching op).

Targets (issue 17): traced inductor within 3% of untraced, traced aot_eager within 5%; coverage >= 95%.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

from results_io import publish


def step_fn(model, opt, x):
    def step():
        opt.zero_grad(set_to_none=True)
        model(x).sum().backward()
        opt.step()

    return step


def median_step_ms(step, steps: int) -> float:
    import torch

    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        start = time.perf_counter_ns()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter_ns() - start) / 1e6)
    return statistics.median(times)


def run(args) -> dict:
    import polars as pl
    import torch

    import dynascope

    layers = [m for _ in range(20) for m in (torch.nn.Linear(1024, 1024), torch.nn.ReLU())]
    x = torch.randn(args.batch, 1024, device="cuda")
    rows = []
    for backend in ("aot_eager", "inductor"):
        model = torch.nn.Sequential(*layers).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=1e-4)
        plain = step_fn(torch.compile(model, backend=backend), opt, x)
        for _ in range(3):
            plain()
        with tempfile.TemporaryDirectory() as out:
            session = dynascope.session(os.path.join(out, "gpu.pfw.gz"))
            traced = step_fn(torch.compile(model, backend=dynascope.backend(name=backend)), opt, x)
            for _ in range(3):
                traced()
            samples: dict[str, list[float]] = {"untraced": [], "traced": [], "torch.profiler": []}
            for _ in range(args.repeats):
                samples["untraced"].append(median_step_ms(plain, args.steps))
                samples["traced"].append(median_step_ms(traced, args.steps))
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
                    samples["torch.profiler"].append(median_step_ms(plain, args.steps))
            session.finalize()
            summary = dynascope.summarize_files(out)
            kernels = summary.by_device.filter(pl.col("activity") == "kernel")
            covered = float((kernels.get_column("launched") * kernels.get_column("total_us")).sum() or 0)
            total = float(kernels.get_column("total_us").sum() or 0)
        base = statistics.median(samples["untraced"])
        for how, values in samples.items():
            ms = statistics.median(values)
            rows.append({"backend": backend, "how": how, "step_ms": ms, "ratio": ms / base,
                         "kernel_coverage": covered / total if how == "traced" and total else None})  # fmt: skip
    return {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "batch": args.batch, "rows": rows}


def render(results: dict) -> str:
    lines = [f"GPU time on {results['gpu']} (torch {results['torch']}), MLP 20 x Linear(1024), batch {results['batch']}",
             "", "| backend | run | median step ms | vs untraced | kernel time covered by op/kernel events |",
             "|---|---|---:|---:|---:|"]  # fmt: skip
    for r in results["rows"]:
        cover = f"{r['kernel_coverage']:.1%}" if r["kernel_coverage"] is not None else ""
        lines.append(f"| {r['backend']} | {r['how']} | {r['step_ms']:.2f} | {(r['ratio'] - 1) * 100:+.1f}% | {cover} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "gpu.json"))
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("bench_gpu: needs a CUDA GPU; skipped")
        return 0
    if args.quick:
        args.steps, args.repeats = 5, 2
    results = run(args)
    publish(render(results), results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
