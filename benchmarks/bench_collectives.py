"""Collective events (capture/collectives.py): what tracing adds to each collective, and to a compiled DDP step.

1. Added time per collective: one process on torch's "fake" process group (its collectives return at once,
   so what is left is the call and dynascope's wrapper): inside a dynascope session, blocks of calls with
   dynascope's wrappers removed alternate with blocks of calls through them (an issue marker and a
   complete event per call); the fastest block of each per repeat, median over `--repeats`; the added µs
   per collective and the ratio to the same run's untraced call. Target: at most 2 µs per event.
2. A compiled DDP step on 2 ranks (torchrun, gloo, CPU; DDP(torch.compile(model)) under aot_eager, four
   buckets): the median step time of `--steps` timed steps after warm-up, untraced, under a dynascope
   session without the collective events (capture/collectives.py uninstalled), and under a session with
   every event, launches alternating, median over `--ddp-repeats`. Target: within 5%.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


# -- 1: one process, fake backend -----------------------------------------------------------------


def _operations(dist) -> list[tuple[str, object]]:
    """(name, a call of it) for each measured operation (each looks the function up in `dist` per call)."""
    t = torch.ones(1024)
    out = torch.empty(2048)
    inp = torch.ones(2048)
    return [
        ("all_reduce", lambda: dist.all_reduce(t)),
        ("all_reduce async + wait", lambda: dist.all_reduce(t, async_op=True).wait()),
        ("all_gather_into_tensor", lambda: dist.all_gather_into_tensor(out, t)),
        ("reduce_scatter_tensor", lambda: dist.reduce_scatter_tensor(t, inp)),
        ("broadcast", lambda: dist.broadcast(t, src=0)),
    ]


def _block_us(fn, calls: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - start) / calls / 1000


def per_event(calls: int, repeats: int, block: int = 500) -> list[dict]:
    """Inside one dynascope session, blocks of `block` calls with dynascope's collective wrappers removed
    (torch.distributed exactly as untraced) alternate with blocks of calls through them (an issue marker
    and a complete event per call); per repeat, the fastest block of each, so that other processes on the
    machine weigh on neither; the median over repeats."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    import dynascope
    from dynascope.capture import collectives

    if not dist.is_initialized():
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    rows = []
    with tempfile.TemporaryDirectory() as out, dynascope.session(os.path.join(out, "bench.pfw.gz")):
        for name, fn in _operations(dist):
            plain_us, traced_us = [], []
            for _ in range(repeats):
                best_plain, best_traced = float("inf"), float("inf")
                for _ in range(max(1, calls // block)):
                    collectives.uninstall()
                    best_plain = min(best_plain, _block_us(fn, block))
                    collectives.install()
                    best_traced = min(best_traced, _block_us(fn, block))
                plain_us.append(best_plain)
                traced_us.append(best_traced)
            base, with_trace = statistics.median(plain_us), statistics.median(traced_us)
            rows.append({"operation": name, "untraced_us": base, "traced_us": with_trace,
                         "added_us": with_trace - base, "ratio": with_trace / base})  # fmt: skip
    return rows


# -- 2: a compiled DDP step on 2 ranks ------------------------------------------------------------


def ddp_worker(out: str, trace: bool, steps: int, warmup: int, comm: bool = True) -> None:
    """Run by torchrun: time compiled DDP steps; rank 0 writes the step times to `out`."""
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    session = None
    if trace:
        import dynascope

        session = dynascope.session(os.path.join(os.path.dirname(out), f"ddp-rank{rank}.pfw.gz"))
        if not comm:  # everything else dynascope records, without the collective events
            from dynascope.capture import collectives

            collectives.uninstall()
    torch.manual_seed(0)
    width = 512
    model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(4)], nn.Linear(width, 10))
    ddp = DDP(torch.compile(model, backend="aot_eager"), bucket_cap_mb=1.0)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(64, width, generator=g), torch.randint(0, 10, (64,), generator=g)
    times = []
    for step in range(warmup + steps):
        dist.barrier()
        start = time.perf_counter()
        loss = nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if step >= warmup:
            times.append(time.perf_counter() - start)
    if session is not None:
        session.finalize()
    if rank == 0:
        with open(out, "w") as f:
            json.dump(times, f)
    dist.destroy_process_group()


def ddp_step(repeats: int, steps: int, warmup: int) -> dict:
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    kinds = {"untraced": [], "traced": ["--trace"], "traced_no_comm": ["--trace", "--no-comm"]}
    medians: dict[str, list[float]] = {kind: [] for kind in kinds}
    with tempfile.TemporaryDirectory() as out:
        for r in range(repeats):
            for kind, flags in kinds.items():
                result = os.path.join(out, f"{kind}-{r}.json")
                cmd = [torchrun, "--standalone", "--nproc_per_node=2", os.path.abspath(__file__), "--ddp-worker",
                       result, "--steps", str(steps), "--warmup", str(warmup), *flags]  # fmt: skip
                done = subprocess.run(cmd, cwd=out, env=env, capture_output=True, text=True, timeout=600, check=False)
                if done.returncode != 0:
                    raise RuntimeError(f"the {kind} DDP run failed:\n{done.stderr[-3000:]}")
                with open(result) as f:
                    medians[kind].append(statistics.median(json.load(f)) * 1000)
    plain, traced = statistics.median(medians["untraced"]), statistics.median(medians["traced"])
    no_comm = statistics.median(medians["traced_no_comm"])
    return {"untraced_ms": plain, "traced_ms": traced, "ratio": traced / plain, "traced_no_comm_ms": no_comm,
            "ratio_no_comm": no_comm / plain, "comm_share": (traced - no_comm) / plain, "runs": medians}  # fmt: skip


def render(results: dict) -> str:
    lines = [
        (
            f"torch {results['torch']}, Python {results['python']}; fake process group, {results['calls']} calls, "
            f"median of {results['repeats']}:"
        ),
        "",
        "| collective | untraced µs/call | traced µs/call | added µs/call (2 events) | ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in results["per_event"]:
        lines.append(f"| {row['operation']} | {row['untraced_us']:.2f} | {row['traced_us']:.2f} "
                     f"| {row['added_us']:.2f} | {row['ratio']:.2f}x |")  # fmt: skip
    ddp = results.get("ddp")
    if ddp:
        lines += [
            "",
            (
                f"Compiled DDP step, 2 ranks (gloo, CPU, aot_eager, 4 buckets), median step of {results['steps']} "
                f"steps, median of {results['ddp_repeats']} launches each:"
            ),
            "",
            "| DDP(torch.compile(model)) | ms/step | ratio to untraced |",
            "|---|---:|---:|",
            f"| untraced | {ddp['untraced_ms']:.2f} | 1.000x |",
            f"| traced, collective events off | {ddp['traced_no_comm_ms']:.2f} | {ddp['ratio_no_comm']:.3f}x |",
            f"| traced (all events) | {ddp['traced_ms']:.2f} | {ddp['ratio']:.3f}x |",
            f"| collective events' own share | | {ddp['comm_share'] * 100:+.1f}% |",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--ddp-repeats", type=int, default=3)
    parser.add_argument("--no-ddp", action="store_true", help="only the per-event figures")
    parser.add_argument("--quick", action="store_true", help="2000 calls, median of 3; 10 DDP steps, 1 launch each")
    parser.add_argument("--json", default=os.path.join(HERE, "results", "collectives.json"))
    parser.add_argument("--ddp-worker", help=argparse.SUPPRESS)
    parser.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-comm", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.ddp_worker:
        ddp_worker(args.ddp_worker, args.trace, args.steps, args.warmup, comm=not args.no_comm)
        return 0
    if args.quick:
        args.calls, args.repeats, args.steps, args.ddp_repeats = 2000, 3, 10, 1
    torch.set_num_threads(1)
    results: dict = {"torch": torch.__version__, "python": sys.version.split()[0], "calls": args.calls,
                     "repeats": args.repeats, "steps": args.steps, "ddp_repeats": args.ddp_repeats}  # fmt: skip
    results["per_event"] = per_event(args.calls, args.repeats)
    if not args.no_ddp:
        results["ddp"] = ddp_step(args.ddp_repeats, args.steps, args.warmup)
    print(render(results))
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as fh:
        json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
