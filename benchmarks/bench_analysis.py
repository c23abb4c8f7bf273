"""Analysis benchmark: read + summarise throughput and peak memory on a large generated trace.

    python benchmarks/bench_analysis.py                 # 10 million op events in 8 files
    python benchmarks/bench_analysis.py --events 500000 # a quick run
    python benchmarks/bench_analysis.py --dir /tmp/big  # keep (and reuse) the generated files

Generates per-process `.pfw.gz` files in dynascope's format (docs/trace-format.md: OH records, op
events that refer to them, graph calls, step regions, compile events, multi-member gzip), then runs
each measured variant in a fresh child process and reports its wall time, events/s and peak RSS (the
child's own high-water mark, VmHWM, or its Dask workers' if higher):

- `json.loads` baseline: gzip + `json.loads` line by line + per-op count/total in dicts;
- `summarize_files`: dynascope's single-machine path (one partial per file, merged; op and graph-call
  lines through the byte-level fast path, analyze/fastpath.py);
- `read_trace + summarize`: the whole frame in memory (the summary columns only), then summarise;
- `dask (N workers)`: the same partials on a local Dask cluster.

Each variant is timed from the call that reads and summarises: the child's imports and the load of
the compiled scanner come first and are reported apart as `startup_s` (about half a second; CPU time
covers the whole child).

The fast path's byte scanner (analyze/read/_scan.py) is compiled by numba on its first use on a machine and
cached in __pycache__; a child process warms that cache before the measured variants (reported as the
"scanner compile" time: seconds when the cache was cold, well under one when warm), so every variant reports
steady-state numbers.

Prints a table and writes benchmarks/results/analysis.json. `main(argv)` returns 0.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "analysis.json"

FWD_OPS = 20
BWD_OPS = 40
PER_STEP = FWD_OPS + BWD_OPS  # op events per step; + 2 graph calls + 1 region
LAYOUT = 2  # bump when the generated layout changes (a kept --dir is regenerated)


# ----------------------------------------------------------------------------------------------
# generation


def _compress(data: bytes) -> bytes:
    """Multi-member gzip, 4 MB members cut at line ends (as the writer does)."""
    try:
        from isal import igzip as gz  # fastest when installed

        compress = lambda b: gz.compress(b, compresslevel=1)  # noqa: E731
    except ImportError:
        compress = lambda b: gzip.compress(b, compresslevel=1)  # noqa: E731
    out = []
    pos, n = 0, len(data)
    while pos < n:
        end = data.find(b"\n", min(pos + (4 << 20), n - 1))
        end = n if end < 0 else end + 1
        out.append(compress(data[pos:end]))
        pos = end
    return b"".join(out)


def _write_file(path: Path, pid: int, rank: int, world: int, n_ops: int, seed: int) -> int:
    """One process's trace with about n_ops op events, laid out as dynascope's writer lays it out
    (docs/trace-format.md): numbered OH records, graph events naming their graph's OH, op events that
    refer to attribution through their graph call (id = p_idx + 1 + k), one step region per step."""
    import numpy as np
    import polars as pl

    rng = np.random.default_rng(seed)
    hh = f"{rng.integers(1 << 62):016x}"
    steps = max(1, n_ops // PER_STEP)
    targets = ["addmm", "relu", "t", "view", "mm", "threshold_backward", "sum.dim_IntList", "native_layer_norm"]
    dumps = lambda o: json.dumps(o, separators=(",", ":"))  # noqa: E731
    head = [
        {"name": "HH", "cat": "dftracer", "pid": pid, "tid": pid, "ph": "M", "args": {"hhash": hh, "name": f"node{rank // 8}", "value": hh}},
        {"name": "thread_name", "cat": "dftracer", "pid": pid, "tid": pid, "ph": "M", "args": {"hhash": hh, "name": "MainThread", "value": "thread_name"}},
        {"name": "process_name", "cat": "dftracer", "pid": pid, "tid": pid, "ph": "M", "args": {"hhash": hh, "name": f"python train.py [rank {rank}]"}},
        {"id": 1, "name": "start", "cat": "dftracer", "pid": pid, "tid": pid, "ts": 1_795_000_000_000_000, "dur": 0, "ph": "X",
         "args": {"hhash": hh, "ppid": 1, "rank": rank, "world_size": world, "local_rank": rank % 8, "p_idx": -1, "level": 1}},
        {"id": 2, "name": "entire_frame_compile", "cat": "dynamo.compile", "pid": pid, "tid": pid, "ts": 1_795_000_000_100_000, "dur": 2_000_000, "ph": "X",
         "args": {"hhash": hh, "p_idx": -1, "level": 1, "compile_id": "0/0"}},
    ]  # fmt: skip
    names = []
    number = 0
    for phase, count in (("forward", FWD_OPS), ("backward", BWD_OPS)):
        number += 1
        graph_number = number
        head.append({"name": "OH", "cat": "dynascope", "pid": pid, "tid": pid, "ph": "M", "args": {
            "hhash": hh, "value": graph_number, "hash": f"{rng.integers(1 << 62):016x}", "kind": "graph", "compile_id": "0/0",
            "graph": "__compiled_fn_1", "phase": phase, "backend": "aot_eager", "n_ops": count}})  # fmt: skip
        for k in range(count):
            number += 1
            tgt = targets[(k + (0 if phase == "forward" else 3)) % len(targets)]
            names.append(f"function.{tgt}.default" if "." not in tgt else f"function.{tgt}")
            head.append({"name": "OH", "cat": "dynascope", "pid": pid, "tid": pid, "ph": "M", "args": {
                "hhash": hh, "value": number, "hash": f"{rng.integers(1 << 62):016x}", "graph_op": graph_number, "index": k,
                "kind": "op", "compile_id": "0/0", "graph": "__compiled_fn_1", "phase": phase, "node": f"{tgt}_{k}",
                "op_type": "call_function", "target": f"aten.{tgt}", "layer": f"layers.{(k % FWD_OPS) // 4}",
                "module_type": "Linear" if "mm" in tgt else "ReLU", "file": "train.py", "path": "/home/me/train.py",
                "line": 10 + k % FWD_OPS, "code": f"x = self.l{k % FWD_OPS}(x)", "backend": "aot_eager"}})  # fmt: skip
    head_text = "[\n" + "".join(dumps(e) + "\n" for e in head)

    # file order of one step: fwd graph call, its ops, bwd graph call, its ops, then the step region
    # (written when it ends); ids in opening order: region r, fwd graph r+1, its ops, bwd graph, its ops
    R = PER_STEP + 3
    n = steps * R
    i = np.arange(n, dtype=np.int64)
    s, j = i // R, i % R
    r = 3 + s * R
    bwd_g = 1 + FWD_OPS  # row of the bwd graph call within a step
    kind = np.where((j == 0) | (j == bwd_g), 1, np.where(j == R - 1, 2, 0))  # 0 op, 1 graph, 2 region
    ids = np.where(kind == 2, r, r + 1 + j)
    parent = np.where(j < bwd_g, r + 1, r + 1 + bwd_g)
    p_idx = np.where(kind == 0, parent, np.where(kind == 1, r, -1))
    op_row = np.where(j < bwd_g, j - 1, j - 2)  # index into names for op rows
    op_row = np.clip(op_row, 0, PER_STEP - 1)
    step_len = 40_000
    t0 = 1_795_000_002_200_000 + s * step_len
    dur_op = rng.integers(1, 200, n)
    ts = np.where(kind == 2, t0, t0 + 10 + j * 500)
    dur = np.where(kind == 0, dur_op, np.where(kind == 1, np.where(j == 0, 500 * (FWD_OPS + 1), 500 * (BWD_OPS + 1)), step_len - 20))
    grad = np.where(j < bwd_g, 1, 0)
    gop = np.where(j == 0, 1, 2 + FWD_OPS)
    name_s = pl.Series(names)
    df = pl.DataFrame({"id": ids, "ts": ts, "dur": dur, "p_idx": p_idx, "kind": kind, "op_row": op_row, "step": s, "grad": grad, "gop": gop, "fwd": j < bwd_g})
    df = df.with_columns(pl.col("op_row").map_batches(name_s.gather, return_dtype=pl.String).alias("nm"))
    P = str(pid)
    tail_cols = [pl.lit('},"id":'), pl.col("id").cast(pl.String), pl.lit(',"ts":'), pl.col("ts").cast(pl.String), pl.lit(',"dur":'),
                 pl.col("dur").cast(pl.String), pl.lit("}")]  # fmt: skip
    op_line = pl.concat_str([pl.lit('{"name":"'), pl.col("nm"), pl.lit(f'","cat":"dynamo","pid":{P},"tid":{P},"ph":"X","args":{{"grad_enabled":'),
                             pl.col("grad").cast(pl.String), pl.lit(',"level":3,"p_idx":'), pl.col("p_idx").cast(pl.String), *tail_cols])  # fmt: skip
    g_line = pl.concat_str([pl.lit('{"name":"'), pl.when(pl.col("fwd")).then(pl.lit("__compiled_fn_1.forward")).otherwise(pl.lit("__compiled_fn_1.backward")),
                            pl.lit(f'","cat":"dynamo.graph","pid":{P},"tid":{P},"ph":"X","args":{{"hhash":"{hh}","grad_enabled":'),
                            pl.col("grad").cast(pl.String), pl.lit(',"op":'), pl.col("gop").cast(pl.String), pl.lit(',"level":2,"p_idx":'),
                            pl.col("p_idx").cast(pl.String), *tail_cols])  # fmt: skip
    r_line = pl.concat_str([pl.lit('{"id":'), pl.col("id").cast(pl.String), pl.lit(f',"name":"step","cat":"region","pid":{P},"tid":{P},"ts":'),
                            pl.col("ts").cast(pl.String), pl.lit(',"dur":'), pl.col("dur").cast(pl.String),
                            pl.lit(f',"ph":"X","args":{{"hhash":"{hh}","p_idx":-1,"level":1,"epoch":0,"step":'), pl.col("step").cast(pl.String), pl.lit("}}")])  # fmt: skip
    lines = df.select(pl.when(pl.col("kind") == 0).then(op_line).when(pl.col("kind") == 1).then(g_line).otherwise(r_line).alias("l"))
    body = lines.get_column("l").str.join("\n").item()
    end_id = int(ids.max()) + 1
    tail = dumps({"id": end_id, "name": "end", "cat": "dftracer", "pid": pid, "tid": pid, "ts": int(ts.max()) + 100_000, "dur": 0,
                  "ph": "X", "args": {"hhash": hh, "p_idx": -1, "level": 1, "num_events": end_id - 1, "dropped": 0, "used": {"dynamo": 1}}})  # fmt: skip
    data = (head_text + body + "\n" + tail + "\n").encode()
    path.write_bytes(_compress(data))
    return steps * PER_STEP


def generate(directory: Path, events: int, files: int) -> tuple[list[Path], int, int]:
    """Write `files` per-rank files with `events` op events in all; returns (paths, op events, bytes)."""
    directory.mkdir(parents=True, exist_ok=True)
    manifest = directory / "manifest.json"
    if manifest.exists():
        m = json.loads(manifest.read_text())
        if m.get("layout") == LAYOUT and m.get("events") == events and m.get("files") == files and all((directory / p).exists() for p in m["paths"]):
            paths = [directory / p for p in m["paths"]]
            return paths, m["ops"], sum(p.stat().st_size for p in paths)
    per = events // files
    paths = [directory / f"trace-{1000 + r}.pfw.gz" for r in range(files)]
    with ThreadPoolExecutor(2) as pool:
        ops = sum(pool.map(lambda r: _write_file(paths[r], 1000 + r, r, files, per, r), range(files)))
    manifest.write_text(json.dumps({"layout": LAYOUT, "events": events, "files": files, "ops": ops, "paths": [p.name for p in paths]}))
    return paths, ops, sum(p.stat().st_size for p in paths)


# ----------------------------------------------------------------------------------------------
# measured variants (each runs in a fresh child process)


def _variant_baseline(paths: list[str]) -> dict:
    events = 0
    per_op: dict[str, list] = {}
    for p in paths:
        with gzip.open(p, "rb") as fh:
            for raw in fh:
                raw = raw.strip()
                if not raw or raw in (b"[", b"]"):
                    continue
                e = json.loads(raw)
                if e.get("ph") != "X":
                    continue
                events += 1
                if e.get("cat") == "dynamo":
                    acc = per_op.setdefault(e["name"], [0, 0])
                    acc[0] += 1
                    acc[1] += e["dur"]
    return {"events": events, "ops": sum(v[0] for v in per_op.values())}


def _variant_files(paths: list[str]) -> dict:
    from dynascope.analyze.pipeline import summarize_files

    s = summarize_files(paths)
    return {"events": s.meta["events"], "ops": s.meta["ops"]}


def _variant_frame(paths: list[str]) -> dict:
    from dynascope.analyze.pipeline import SUMMARY_COLUMNS, summarize
    from dynascope.analyze.read.reader import read_trace

    frame = read_trace(paths, columns=SUMMARY_COLUMNS)
    s = summarize(frame)
    return {"events": s.meta["events"], "ops": s.meta["ops"]}


def _variant_dask(paths: list[str], workers: int) -> dict:
    from dynascope.analyze.pipeline import summarize_files

    s = summarize_files(paths, workers=workers)
    return {"events": s.meta["events"], "ops": s.meta["ops"]}


def _warm_scanner() -> None:
    from dynascope.analyze.read import _scan

    _scan.warm_up()


def _child_main(argv: list[str]) -> int:
    variant, listfile = argv[0], argv[1]
    if variant == "generate":  # in a child too, so the parent stays small
        paths, ops, size = generate(Path(listfile), int(argv[2]), int(argv[3]))
        print("RESULT " + json.dumps({"paths": [str(p) for p in paths], "ops": ops, "size": size}), flush=True)
        return 0
    if variant == "warm":
        t0 = time.perf_counter()
        _warm_scanner()
        print("RESULT " + json.dumps({"seconds": time.perf_counter() - t0}), flush=True)
        return 0
    paths = json.loads(Path(listfile).read_text())
    import warnings

    warnings.simplefilter("ignore")
    started = time.perf_counter()
    if variant != "baseline":  # imports and loading the compiled scanner: timed apart, as startup

        _warm_scanner()
    t0 = time.perf_counter()
    if variant == "baseline":
        out = _variant_baseline(paths)
    elif variant == "files":
        out = _variant_files(paths)
    elif variant == "frame":
        out = _variant_frame(paths)
    elif variant.startswith("dask"):
        out = _variant_dask(paths, int(variant[4:]))
    else:
        raise SystemExit(f"unknown variant {variant}")
    out["seconds"] = time.perf_counter() - t0
    out["startup_s"] = t0 - started
    out["peak_mb"] = _peak_mb()
    print("RESULT " + json.dumps(out), flush=True)
    return 0


def _peak_mb() -> float:
    """This process's own high-water mark (VmHWM), or that of any process it started and waited for
    (the Dask workers). wait4's ru_maxrss would also count the parent's memory at the fork before exec."""
    own = 0.0
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                own = int(line.split()[1]) / 1024.0
    import resource

    return max(own, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0)


def _run_child(variant: str, listfile: Path, *extra: str) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", variant, str(listfile), *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    out = proc.stdout.read().decode()
    err = proc.stderr.read().decode()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{variant} failed ({proc.returncode}):\n{err[-3000:]}")
    line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")][-1]
    res = json.loads(line[7:])
    res.setdefault("peak_mb", usage.ru_maxrss / 1024.0)  # Linux: kilobytes
    res["cpu_s"] = usage.ru_utime + usage.ru_stime  # the child's CPU time: what a busy machine cannot inflate
    if "events" in res:
        res["events_per_s"] = res["events"] / res["seconds"] if res["seconds"] else 0.0
        res["events_per_cpu_s"] = res["events"] / res["cpu_s"] if res["cpu_s"] else 0.0
    return res


# ----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        return _child_main(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=10_000_000, help="op events to generate (default 10 million)")
    ap.add_argument("--files", type=int, default=8, help="per-rank files (default 8)")
    ap.add_argument("--dir", help="where to write the trace (kept; reused when it matches); default: a temp dir")
    ap.add_argument("--workers", type=int, default=2, help="local Dask workers (default 2)")
    ap.add_argument("--skip-baseline", action="store_true", help="skip the json.loads baseline")
    ap.add_argument("--skip-dask", action="store_true")
    ap.add_argument("--out", default=str(RESULTS), help="JSON results file")
    args = ap.parse_args(argv)

    tmp = None
    directory = Path(args.dir) if args.dir else Path(tmp := tempfile.mkdtemp(prefix="dynascope-bench-"))
    try:
        t0 = time.perf_counter()
        gen = _run_child("generate", directory, str(args.events), str(args.files))
        paths, ops, size = [Path(p) for p in gen["paths"]], gen["ops"], gen["size"]
        gen_s = time.perf_counter() - t0
        listfile = directory / "paths.json"
        listfile.write_text(json.dumps([str(p) for p in paths]))
        print(f"trace: {len(paths)} files, {ops:,} op events, {size / 1e6:.0f} MB gzip ({size / max(ops, 1):.1f} B/op event); generated in {gen_s:.1f}s", flush=True)
        try:
            import importlib

            inflater = importlib.import_module("dynascope.analyze.read._inflate").backend_name()
        except Exception:  # noqa: BLE001
            inflater = "?"
        warm = _run_child("warm", listfile)
        print(f"scanner compile (numba, cached on disk after the first run): {warm['seconds']:.1f}s", flush=True)
        variants = []
        if not args.skip_baseline:
            variants.append(("json.loads line by line (baseline)", "baseline"))
        variants.append(("dynascope summarize_files", "files"))
        variants.append(("dynascope read_trace + summarize", "frame"))
        if not args.skip_dask:
            variants.append((f"dynascope on local Dask ({args.workers} workers)", f"dask{args.workers}"))
        rows = []
        for label, v in variants:
            res = _run_child(v, listfile)
            res["variant"] = label
            rows.append(res)
            print(f"  {label}: {res['events']:,} events in {res['seconds']:.2f}s = {res['events_per_s'] / 1e6:.2f} M events/s, "
                  f"{res['cpu_s']:.2f} CPU-s, peak {res['peak_mb']:.0f} MB (startup {res['startup_s']:.2f}s before the clock)", flush=True)  # fmt: skip
        base = next((r for r in rows if r["variant"].startswith("json.loads")), None)
        print()
        header = (
            f"{'variant':45s} {'events':>12s} {'seconds':>8s} {'M events/s':>11s} {'CPU s':>7s} {'M ev/CPU-s':>11s} "
            f"{'peak MB':>8s} {'vs baseline':>12s}"
        )
        print(header)
        print("-" * len(header))
        for r in rows:
            speed = f"{r['events_per_s'] / base['events_per_s']:.1f}x" if base else "-"
            print(
                f"{r['variant']:45s} {r['events']:>12,d} {r['seconds']:>8.2f} {r['events_per_s'] / 1e6:>11.2f} {r['cpu_s']:>7.1f} "
                f"{r['events_per_cpu_s'] / 1e6:>11.2f} {r['peak_mb']:>8.0f} {speed:>12s}"
            )
        result = {
            "benchmark": "analysis",
            "op_events": ops,
            "files": len(paths),
            "gzip_bytes": size,
            "cpus": os.cpu_count(),
            "inflater": inflater,
            "python": sys.version.split()[0],
            "rows": rows,
            "scanner_compile_s": warm["seconds"],
            "target": {"events_per_s": 2_000_000, "peak_mb": 1024},
            "load_average_at_end": os.getloadavg(),
        }
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"\nwritten {out}")
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
