"""The job-wide report over many ranks: synthetic compiled-DDP rank traces, summarised serially (one
mergeable partial per file, analyze/summarize.summarize_files) and on a local Dask cluster
(analyze/dask.py), with events per second and peak memory.

    python benchmarks/bench_ranks.py                 # 64 and 256 ranks
    python benchmarks/bench_ranks.py --ranks 16      # one size
    python benchmarks/bench_ranks.py --quick         # 8 ranks, smoke run

Each rank's trace is what a compiled DDP rank writes (docs/trace-format.md): a dataloader.next, a forward
graph call with its ops, an autograd backward holding the backward graph call (with its ops) during which
DDP's buckets are all-reduced (issue marker, then the complete event at completion: every rank completes
a bucket once the last rank issued it), optimizer.step; ranks on the same host (8 a host) share a clock,
other hosts' clocks are shifted. `write_rank_trace` is also what the collective analysis tests write
(tests/analyze/test_comm_*.py): a planted straggler, clock shift, hang and cut are options.

Each variant runs in a fresh child process; its peak memory is the child's high-water mark (VmHWM), the
Dask workers' included. Results: benchmarks/results/ranks.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
T0 = 1_795_000_000_000_000  # µs
STEP_US = 100_000
FWD_OPS = 24
BWD_OPS = 36
BUCKETS = 4
COMM_US = 5_000  # a bucket's all-reduce, from its last issue to its completion
RANKS_PER_HOST = 8
HOST_SHIFT_US = 250_000  # clock of host h: + h * this (+ a per-host odd part)
MEMORY_BOUND_MB = 768  # docs/ranks.md: the job-wide report over 256 ranks (100 steps each) stays within this


def _dumps(o: dict) -> str:
    return json.dumps(o, separators=(",", ":"))


class _Ids:
    def __init__(self) -> None:
        self.n = 1

    def take(self, k: int = 1) -> int:
        first = self.n
        self.n += k
        return first


def job_timeline(world: int, steps: int, straggle: tuple[int, int, int] | None = None,
                 hang: tuple[int, int] | None = None) -> list[list[dict]]:
    """Per rank, per step: the times (true clock) of its step: start, fwd, bwd graph, issues and
    completions of the buckets, backward end, optimizer end. A straggler (step, rank, µs) sleeps before
    its backward; a hang (step, rank): that rank never gets its data from that step on."""
    out: list[list[dict]] = [[] for _ in range(world)]
    start = [T0 + 3_000_000 + (r * 37) % 200 for r in range(world)]
    for s in range(steps):
        plan = []
        for r in range(world):
            t = start[r]
            data_end = t + 1_000 + (r * 13 + s * 7) % 300
            fwd = (data_end + 100, data_end + 100 + 20_000)
            sleep = straggle[2] if straggle and (s, r) == (straggle[0], straggle[1]) else 0
            bwd0 = fwd[1] + 500 + sleep
            bwd = (bwd0, bwd0 + 30_000)
            issues = [bwd0 + 7_000 * (k + 1) for k in range(BUCKETS)]
            plan.append({"start": t, "data_end": data_end, "fwd": fwd, "bwd": bwd, "issues": issues, "sleep": sleep})
        stuck = {hang[1]} if hang and s >= hang[0] else set()
        for k in range(BUCKETS):
            last = max(p["issues"][k] for r, p in enumerate(plan) if r not in stuck)
            for r, p in enumerate(plan):
                p.setdefault("done", []).append(None if stuck else last + COMM_US + (r * 3) % 50)
        for r, p in enumerate(plan):
            p["stuck"] = r in stuck
            p["hung"] = bool(stuck)
            done = [d for d in p["done"] if d is not None]
            p["bwd_end"] = max([p["bwd"][1], *done]) + 200
            p["opt"] = (p["bwd_end"] + 100, p["bwd_end"] + 3_100)
            start[r] = p["opt"][1] + 50
            out[r].append(p)
        if stuck:
            break
    return out


def write_rank_trace(path: Path, rank: int, world: int, plan: list[dict], *, shift_us: int = 0, host: str | None = None,
                     pid: int | None = None, cut: str | None = "end", per_host: int = RANKS_PER_HOST) -> int:
    """One rank's trace from its plan (job_timeline), its clock `shift_us` ahead. `cut`: "end" (a normal end
    record), "SIGTERM" (the cut record, then the end record), "kill" (no end record). Returns events written."""
    pid = pid or 10_000 + rank
    tid = pid
    hh = f"{(rank // per_host) + 1:016x}"
    host = host or f"node{rank // per_host}"
    ids = _Ids()
    lines = [
        {"name": "HH", "cat": "dftracer", "pid": pid, "tid": tid, "ph": "M", "args": {"hhash": hh, "name": host, "value": hh}},
        {"name": "thread_name", "cat": "dftracer", "pid": pid, "tid": tid, "ph": "M", "args": {"hhash": hh, "name": "MainThread", "value": "thread_name"}},
        {"id": ids.take(), "name": "start", "cat": "dftracer", "pid": pid, "tid": tid, "ts": T0 + shift_us, "dur": 0, "ph": "X",
         "args": {"hhash": hh, "ppid": 1, "rank": rank, "world_size": world, "local_rank": rank % per_host}},
    ]  # fmt: skip
    number = 0
    graph_refs = {}
    for phase, count in (("forward", FWD_OPS), ("backward", BWD_OPS)):
        number += 1
        g = graph_refs[phase] = number
        lines.append({"name": "OH", "cat": "dynascope", "pid": pid, "tid": tid, "ph": "M", "args": {
            "hhash": hh, "value": g, "kind": "graph", "compile_id": "0/0", "graph": "__compiled_fn_1", "phase": phase,
            "backend": "inductor", "n_ops": count}})  # fmt: skip
        for k in range(count):
            number += 1
            lines.append({"name": "OH", "cat": "dynascope", "pid": pid, "tid": tid, "ph": "M", "args": {
                "hhash": hh, "value": number, "graph_op": g, "index": k, "kind": "op", "compile_id": "0/0",
                "graph": "__compiled_fn_1", "phase": phase, "layer": f"layers.{k % 6}", "module_type": "Linear",
                "target": "aten.mm" if k % 2 else "aten.relu", "file": "train.py", "line": 10 + k % 6}})  # fmt: skip

    def x(name, cat, ts, dur, args=None, t=tid, i=None):
        lines.append({"id": i or ids.take(), "name": name, "cat": cat, "pid": pid, "tid": t, "ts": int(ts) + shift_us,
                      "dur": int(dur), "ph": "X", "args": {"hhash": hh, **(args or {})}})  # fmt: skip

    def graph(phase, a, b, count, op_ref, grad):
        g = ids.take(count + 1)
        x(f"__compiled_fn_1.{phase}", "dynamo.graph", a, b - a, {"op": op_ref, "p_idx": -1, "level": 2, "grad_enabled": grad}, i=g)
        width = (b - a) // (count + 1)
        for k in range(count):
            lines.append({"id": g + 1 + k, "name": "aten.mm" if k % 2 else "aten.relu", "cat": "dynamo", "pid": pid,
                          "tid": tid, "ts": a + 10 + k * width + shift_us, "dur": max(1, width - 20), "ph": "X",
                          "args": {"grad_enabled": grad, "level": 3, "p_idx": g}})  # fmt: skip

    x("entire_frame_compile", "dynamo.compile", T0 + 100_000, 2_500_000, {"compile_id": "0/0"})
    seq = 0
    pending = []
    for s, p in enumerate(plan):
        if p["stuck"]:
            # waits for data that never comes: its dataloader.next is open when the job is stopped
            open_regions = [{"tid": tid, "regions": ["dataloader.next"]}]
            break
        x("dataloader.next", "dataloader", p["start"], p["data_end"] - p["start"], {"loader": 1, "batch": s})
        graph("forward", *p["fwd"], FWD_OPS, graph_refs["forward"], 1)
        if p.get("sleep_as"):  # the straggler's delay, traced as something it did
            name, cat, args = p["sleep_as"]
            x(name, cat, p["fwd"][1] + 250, p["sleep"], args)
        x("backward", "autograd", p["bwd"][0], p["bwd_end"] - p["bwd"][0])
        graph("backward", *p["bwd"], BWD_OPS, graph_refs["backward"], 1)
        for k in range(BUCKETS):
            args = {"pg": "0", "seq": seq, "bytes": 1 << 20, "group_size": world, "source": "ddp", "async": 1,
                    "itid": tid, "bucket": BUCKETS - 1 - k, "params": 2, "layers": f"layers.{5 - k}"}  # fmt: skip
            x("all_reduce", "comm", p["issues"][k], 0, {**args, "state": "issued"})
            if p["done"][k] is not None:
                x("all_reduce", "comm", p["issues"][k], p["done"][k] - p["issues"][k], {**args, "state": "done"}, t=tid + 1)
            else:
                pending.append({"op": "all_reduce", "pg": "0", "seq": seq, "bytes": 1 << 20, "source": "ddp",
                                "issued_us": p["issues"][k] + shift_us})  # fmt: skip
            seq += 1
        if p["hung"]:
            open_regions = [{"tid": tid, "regions": ["backward"]}]
            break
        x("optimizer.step", "optimizer", *(p["opt"][0], p["opt"][1] - p["opt"][0]), {"opt": 1})
    else:
        open_regions = []
    last = max(int(e.get("ts", 0)) + int(e.get("dur", 0)) for e in lines if "ts" in e)
    if cut == "SIGTERM":
        x("cut", "dftracer", last - shift_us + 10, 0, {"signal": "SIGTERM", "pending": pending, "open": open_regions})
    if cut in ("end", "SIGTERM"):
        end_args = {"num_events": ids.n - 1, "dropped": 0} | ({"cut": cut} if cut != "end" else {})
        x("end", "dftracer", last - shift_us + 20, 0, end_args)
    text = "[\n" + "".join(_dumps(e) + "\n" for e in lines)
    if str(path).endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode(), compresslevel=1))
    else:
        path.write_text(text)
    return sum(1 for e in lines if e.get("ph") == "X")


def host_shift(rank: int, shift_us: int = HOST_SHIFT_US, per_host: int = RANKS_PER_HOST) -> int:
    """How far host (rank // per_host)'s clock is ahead: h * shift_us plus an odd part below 1 ms."""
    h = rank // per_host
    return h * shift_us + (h * 7919) % 1000


# what a straggler does instead of sleeping (write_job's straggle_as): the event that covers its delay
STRAGGLE_EVENTS = {
    "compile": ("entire_frame_compile", "dynamo.compile", {"compile_id": "0/1"}),  # a recompile
    "io": ("torch.save", "torch.io", {"fname": "ckpt.pt"}),  # a checkpoint
    "data": ("dataloader.next", "dataloader", {"loader": 1}),  # a data stall
    "gc": ("gc.collect", "gc", {}),  # garbage collection
}


def write_job(directory: Path, world: int, steps: int, *, straggle=None, hang=None, shift_us: int = HOST_SHIFT_US,
              cut: dict[int, str] | None = None, per_host: int = RANKS_PER_HOST,
              straggle_as: str = "python") -> tuple[list[Path], int]:
    """Every rank's trace of one job in `directory`; (paths, events). `straggle_as`: what the straggler's
    delay is in its trace: "python" (nothing traced: a sleep) or a key of STRAGGLE_EVENTS."""
    directory.mkdir(parents=True, exist_ok=True)
    plans = job_timeline(world, steps, straggle, hang)
    if straggle_as != "python":
        for plan in plans:
            for p in plan:
                p["sleep_as"] = STRAGGLE_EVENTS[straggle_as] if p["sleep"] else None
    paths, events = [], 0
    for r in range(world):
        p = directory / f"train-rank{r}-{10_000 + r}.pfw.gz"
        how = (cut or {}).get(r, "SIGTERM" if hang else "end")
        events += write_rank_trace(p, r, world, plans[r], shift_us=host_shift(r, shift_us, per_host), cut=how,
                                   per_host=per_host)
        paths.append(p)
    return paths, events


# ----------------------------------------------------------------------------------------------
# the benchmark


def _peak_mb() -> float:
    own = 0.0
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                own = int(line.split()[1]) / 1024.0
    import resource

    return max(own, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0)


def _child(variant: str, directory: str) -> int:
    import warnings

    warnings.simplefilter("ignore")
    from dynascope.analyze.pipeline import summarize_files

    paths = sorted(str(p) for p in Path(directory).glob("*.pfw.gz"))
    t0 = time.perf_counter()
    if variant == "serial":
        s = summarize_files(paths, threads=1)
    elif variant.startswith("dask"):
        s = summarize_files(paths, workers=int(variant[4:]))
    else:
        raise SystemExit(f"unknown variant {variant}")
    seconds = time.perf_counter() - t0
    out = {"events": s.meta["events"], "seconds": seconds, "peak_mb": _peak_mb(),
           "collectives": s.collectives.height, "stragglers": s.stragglers.height,
           "clock_residual_us": int(s.clocks.get_column("residual_us").max() or 0) if s.clocks.height else None}  # fmt: skip
    print("RESULT " + json.dumps(out), flush=True)
    return 0


def _run(variant: str, directory: Path) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", variant, str(directory)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{variant} failed:\n{proc.stderr[-3000:]}")
    res = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1][7:])
    res["events_per_s"] = res["events"] / res["seconds"] if res["seconds"] else 0.0
    return res


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, action="append", help="ranks of a job (repeatable; default 64 and 256)")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2, help="local Dask workers")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dir", default=None, help="where the traces are written (default: a temporary folder)")
    parser.add_argument("--out", default=str(HERE / "results" / "ranks.json"))
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(*args.child)
    sizes = args.ranks or ([8] if args.quick else [64, 256])
    steps = 4 if args.quick else args.steps
    import tempfile

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for world in sizes:
            directory = Path(args.dir or tmp) / f"ranks{world}"
            t0 = time.perf_counter()
            paths, _events = write_job(directory, world, steps, straggle=(min(2, steps - 1), world // 2, 40_000))
            made = time.perf_counter() - t0
            size = sum(p.stat().st_size for p in paths)
            for variant in ("serial", f"dask{args.workers}"):
                res = _run(variant, directory)
                rows.append({"ranks": world, "steps": steps, "variant": variant, "files_mb": size / 1e6,
                             "generate_s": made, **res})  # fmt: skip
    for r in rows:
        r["within_bound"] = r["peak_mb"] <= MEMORY_BOUND_MB
    head = (f"{'ranks':>6} {'variant':>8} {'events':>10} {'seconds':>8} {'events/s':>10} {'peak MB':>8} "
            f"{'collectives':>11}  within {MEMORY_BOUND_MB} MB")  # fmt: skip
    table = "\n".join([head] + [
        f"{r['ranks']:>6} {r['variant']:>8} {r['events']:>10,} {r['seconds']:>8.2f} {r['events_per_s']:>10,.0f} "
        f"{r['peak_mb']:>8.0f} {r['collectives']:>11}  {'yes' if r['within_bound'] else 'NO'}" for r in rows
    ])  # fmt: skip
    from common.results import publish

    publish(table, {"benchmark": "ranks", "python": sys.version.split()[0], "cpus": os.cpu_count(),
                    "memory_bound_mb": MEMORY_BOUND_MB, "rows": rows}, args.out)  # fmt: skip
    return 0 if all(r["within_bound"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
