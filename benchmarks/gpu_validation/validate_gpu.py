"""Issue 17's validation: dynascope's GPU time per layer and per kernel against torch.profiler's.

For ResNet-18 (batch 32, 224x224) and a small GPT-2 (4 layers, 512 wide, batch 8 x 256), one training
step (forward, loss, backward) at a time:

- **aot_eager, per layer.** dynascope traces the compiled model with device time on; its `by_layer` GPU
  column is the reference's rival. The reference is torch.profiler (CPU + CUDA activity) on the same
  model run eagerly, with a `record_function` range around every module's forward (forward hooks):
  each kernel counts under the innermost module range of the op that launched it, and a backward
  kernel under the layer of the forward op whose autograd node ran it (the profiler's `sequence_nr`).
  Layers are named alike on both sides (module paths from the compiled root; "(root)" for the root's
  own ops, such as the loss).
- **inductor, per kernel.** dynascope's device events of the traced inductor model, by kernel name,
  against torch.profiler's CUDA kernels of the untraced inductor model.
- **Coverage.** The share of the device's kernel time within the traced steps that dynascope joined to
  a launching op or kernel event.

A row is checked when it holds at least 1% of the reference's time; the target is every checked row
within 10%, and coverage of at least 95%. Prints the tables and writes benchmarks/results/validate_gpu.json.

Needs CUDA. `--device cpu` is a dry run of the whole comparison with CPU operator events standing in
for kernels on both sides (device.CpuStandInSource: each outermost aten op), on small inputs; it checks
the script, not the GPU figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator

MODULE_RANGE = "dynascope.layer:"
EVALUATE = "autograd::engine::evaluate_function: "
ROOT = "(root)"
CHECKED_SHARE = 0.01
TOLERANCE = 0.10


def synchronize(where: str) -> None:
    import torch

    if where == "cuda":
        torch.cuda.synchronize()


def train_step(model, batch) -> None:
    model.zero_grad(set_to_none=True)
    model(*batch).backward()


# -- the reference: torch.profiler on the eager model, a range per module --------------------------


def module_ranges(model) -> list:
    """Forward hooks that open a profiler range named for each module (its path) around its forward."""
    import torch

    opened: list = []

    def enter(name):
        def hook(module, args):
            scope = torch.autograd.profiler.record_function(MODULE_RANGE + name)
            scope.__enter__()
            opened.append(scope)

        return hook

    def leave(module, args, output):
        opened.pop().__exit__(None, None, None)

    handles = []
    for name, module in model.named_modules():
        handles.append(module.register_forward_pre_hook(enter(name)))
        handles.append(module.register_forward_hook(leave))
    return handles


def _layer_of(event, layer_by_seq: dict[int, str]) -> str | None:
    node = event
    while node is not None:
        if node.name.startswith(MODULE_RANGE):
            return node.name[len(MODULE_RANGE) :] or ROOT
        if node.name.startswith(EVALUATE):
            return layer_by_seq.get(node.sequence_nr)
        node = node.cpu_parent
    return None


def _is_outermost_aten(event) -> bool:
    if not event.name.startswith("aten::"):
        return False
    node = event.cpu_parent
    while node is not None:
        if node.name.startswith("aten::"):
            return False
        node = node.cpu_parent
    return True


def reference_by_layer(model, batches: list, where: str, kernels: dict | None = None) -> tuple[dict[str, float], float]:
    """(µs per layer, all device µs), summed over `batches`, from torch.profiler on the eager model;
    `kernels`, where given, gets µs per layer and kernel name."""
    import torch

    activities = [torch.profiler.ProfilerActivity.CPU]
    if where == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    handles = module_ranges(model)
    try:
        train_step(model, batches[0])  # warm-up: cuDNN's autotuning, the caching allocator
        synchronize(where)
        with torch.profiler.profile(activities=activities) as prof:
            for batch in batches:
                train_step(model, batch)
            synchronize(where)
    finally:
        for handle in handles:
            handle.remove()
    events = [e for e in prof.events() if not e.is_async]
    cpu = torch.autograd.DeviceType.CPU
    layer_by_seq: dict[int, str] = {}
    for e in events:
        if e.device_type == cpu and e.sequence_nr >= 0 and not e.name.startswith(EVALUATE):
            layer = _layer_of(e, {})
            if layer is not None:
                layer_by_seq.setdefault(e.sequence_nr, layer)
    by_layer: dict[str, float] = defaultdict(float)
    total = 0.0
    for e in events:
        if e.device_type != cpu:
            total += e.time_range.elapsed_us()
            continue
        if where == "cuda":
            parts = [(k.name, k.duration) for k in e.kernels]
        else:  # the stand-in: each outermost aten op is a "kernel"
            parts = [(e.name, e.time_range.elapsed_us())] if _is_outermost_aten(e) else []
            total += sum(us for _, us in parts)
        if parts:
            layer = _layer_of(e, layer_by_seq) or "(outside every module)"
            by_layer[layer] += sum(us for _, us in parts)
            for name, us in parts if kernels is not None else ():
                kernels.setdefault(layer, defaultdict(float))[name] += us
    return dict(by_layer), total


def reference_by_kernel(model, batches: list, where: str) -> tuple[dict[str, float], float]:
    """(µs per kernel name, all device µs) of the untraced inductor model, from torch.profiler."""
    import torch

    activity = torch.profiler.ProfilerActivity.CUDA if where == "cuda" else torch.profiler.ProfilerActivity.CPU
    compiled = torch.compile(model, backend="inductor")
    for batch in batches[:2]:
        train_step(compiled, batch)  # compiles
    synchronize(where)
    with torch.profiler.profile(activities=[activity]) as prof:
        for batch in batches:
            train_step(compiled, batch)
        synchronize(where)
    cpu = torch.autograd.DeviceType.CPU
    by_name: dict[str, float] = defaultdict(float)
    for e in prof.events():
        is_kernel = e.device_type != cpu if where == "cuda" else _is_outermost_aten(e)
        if is_kernel:
            by_name[e.name] += e.time_range.elapsed_us()
    return dict(by_name), sum(by_name.values())


# -- dynascope's side -------------------------------------------------------------------------------


def traced(model, batches: list, where: str, backend: str, out: str):
    """Trace `batches` steps of `model` compiled with dynascope's backend (inner `backend`) into `out`;
    compiling happens in a session of its own first, so `out` holds the measured steps only."""
    import torch

    import dynascope
    from dynascope.capture import device

    compiled = torch.compile(model, backend=dynascope.backend(inner=backend))
    for name, steps in (("warm", batches[:2]), ("measured", batches)):
        with dynascope.session(os.path.join(out, name, "trace.pfw.gz")):
            if where == "cpu":
                device.install(source=device.CpuStandInSource())
            for i, batch in enumerate(steps):
                with dynascope.region("step", step=i):
                    train_step(compiled, batch)
            synchronize(where)
    return os.path.join(out, "measured")


def dynascope_by_layer(trace_dir: str, kernels: dict | None = None) -> tuple[dict[str, float], float]:
    """(GPU µs per layer, kernel coverage) from the traced aot_eager run; `kernels`, where given, gets µs
    per layer and kernel name (the device events that a traced op launched)."""
    import polars as pl

    import dynascope

    summary = dynascope.summarize_files(trace_dir)
    by_layer: dict[str, float] = defaultdict(float)
    for row in summary.by_layer.iter_rows(named=True):
        if row.get("gpu_us"):
            by_layer[row["layer"] or ROOT] += row["gpu_us"]
    if kernels is not None:
        gpu = dynascope.read_trace(trace_dir).filter(pl.col("cat") == "gpu")
        if "launcher" in gpu.columns and "layer" in gpu.columns:
            gpu = gpu.filter(pl.col("launcher").is_not_null())
            layer = pl.col("layer").cast(pl.String)  # the root's own ops have "" (or no layer): "(root)"
            layer = pl.when(layer.is_null() | (layer == "")).then(pl.lit(ROOT)).otherwise(layer)
            totals = gpu.group_by(layer.alias("layer"), pl.col("name").cast(pl.String)).agg(pl.col("dur").sum())
            for layer, name, us in totals.iter_rows():
                kernels.setdefault(layer, defaultdict(float))[name] += float(us)
    return dict(by_layer), coverage(summary)


def dynascope_by_kernel(trace_dir: str) -> tuple[dict[str, float], float]:
    """(GPU µs per device-kernel name, kernel coverage) from the traced inductor run."""
    import polars as pl

    import dynascope

    gpu = dynascope.read_trace(trace_dir).filter(pl.col("cat") == "gpu")
    totals = gpu.group_by(pl.col("name").cast(pl.String)).agg(pl.col("dur").sum())
    return {name: float(us) for name, us in totals.iter_rows()}, coverage(dynascope.summarize_files(trace_dir))


def coverage(summary) -> float:
    import polars as pl

    kernels = summary.by_device.filter(pl.col("activity") == "kernel")
    total = float(kernels.get_column("total_us").sum() or 0)
    covered = float((kernels.get_column("launched") * kernels.get_column("total_us")).sum() or 0)
    return covered / total if total else 0.0


# -- the comparison ---------------------------------------------------------------------------------


def compare(ours: dict[str, float], theirs: dict[str, float], steps: int) -> list[dict]:
    """One row per name, per step: dynascope's µs, torch.profiler's, the difference; checked when the
    reference holds at least CHECKED_SHARE of its total."""
    total = sum(theirs.values()) or 1.0
    rows = []
    for name in sorted(set(ours) | set(theirs), key=lambda n: -theirs.get(n, 0.0)):
        a, b = ours.get(name, 0.0) / steps, theirs.get(name, 0.0) / steps
        checked = theirs.get(name, 0.0) / total >= CHECKED_SHARE
        diff = (a - b) / b if b else None
        rows.append({"name": name, "dynascope_us": a, "profiler_us": b, "share": theirs.get(name, 0.0) / total,
                     "diff": diff, "checked": checked, "within": bool(checked and diff is not None and abs(diff) <= TOLERANCE)})  # fmt: skip
    return rows


COMPARISONS = {  # backend: (what a row is, the reference, dynascope's side)
    "aot_eager": ("layer", reference_by_layer, dynascope_by_layer),
    "inductor": ("kernel", reference_by_kernel, dynascope_by_kernel),
}


def validate(name: str, make, where: str, steps: int, backends: list[str]) -> Iterator[dict]:
    """One part per backend, each as soon as it is done (so that a run stopped midway keeps the parts
    it finished: main writes the JSON after each)."""
    model, inputs = make()
    batches = [inputs() for _ in range(steps)]
    with tempfile.TemporaryDirectory() as tmp:
        for backend in backends:
            by, reference, ours_of = COMPARISONS[backend]
            start = time.perf_counter()
            detail: dict[str, dict] = {"dynascope": {}, "profiler": {}}  # per layer: µs per kernel name
            if by == "layer":
                theirs, _ = reference(model, batches, where, detail["profiler"])
                ours, cover = ours_of(traced(model, batches, where, backend, os.path.join(tmp, backend)), detail["dynascope"])
            else:
                theirs, _ = reference(model, batches, where)
                ours, cover = ours_of(traced(model, batches, where, backend, os.path.join(tmp, backend)))
            rows = compare(ours, theirs, steps)
            for row in rows:  # a layer off target: which kernels each side counted there
                if row["checked"] and not row["within"] and by == "layer":
                    row["kernels"] = {side: top_kernels(detail[side].get(row["name"], {}), steps) for side in detail}
            yield {"model": name, "backend": backend, "by": by, "coverage": cover,
                   "seconds": time.perf_counter() - start, "rows": rows}  # fmt: skip


def top_kernels(by_name: dict[str, float], steps: int, n: int = 6) -> dict[str, float]:
    """The `n` largest kernels of a layer, µs per step, and the rest summed."""
    ranked = sorted(by_name.items(), key=lambda item: -item[1])
    out = {name: round(us / steps, 1) for name, us in ranked[:n]}
    if len(ranked) > n:
        out[f"({len(ranked) - n} more)"] = round(sum(us for _, us in ranked[n:]) / steps, 1)
    return out


def render(results: dict) -> str:
    title = (f"GPU time against torch.profiler on {results['gpu']} (torch {results['torch']}), "
             f"{results['steps']} training steps; checked: rows with >= {CHECKED_SHARE:.0%} of the reference, "
             f"target within {TOLERANCE:.0%}")  # fmt: skip
    lines = [title]
    for part in results["parts"]:
        checked = [r for r in part["rows"] if r["checked"]]
        within = sum(r["within"] for r in checked)
        heading = (f"### {part['model']}, {part['backend']}, per {part['by']}: {within} of {len(checked)} "
                   f"checked rows within {TOLERANCE:.0%}; coverage {part['coverage']:.1%}")  # fmt: skip
        lines += ["", heading, "",
                  f"| {part['by']} | dynascope µs/step | torch.profiler µs/step | diff | share |", "|---|---:|---:|---:|---:|"]  # fmt: skip
        for r in part["rows"]:
            if not r["checked"]:
                continue
            diff = f"{r['diff']:+.1%}" if r["diff"] is not None else "–"
            lines.append(f"| {r['name'][:60]} | {r['dynascope_us']:.1f} | {r['profiler_us']:.1f} | {diff} | {r['share']:.1%} |")
        rest = [r for r in part["rows"] if not r["checked"]]
        if rest:
            lines.append(f"| {len(rest)} smaller rows | {sum(r['dynascope_us'] for r in rest):.1f} | "
                         f"{sum(r['profiler_us'] for r in rest):.1f} | | |")  # fmt: skip
        notes = [f"- {r['name']}, {side}: " + "; ".join(f"{k[:50]} {us}" for k, us in kernels.items())
                 for r in checked for side, kernels in r.get("kernels", {}).items()]  # fmt: skip
        if notes:
            lines += ["", "Kernels of the layers off target (µs per step):", *notes]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cpu: a dry run, CPU ops standing in for kernels, small inputs")
    parser.add_argument("--model", choices=("resnet18", "gpt2", "all"), default="all")
    parser.add_argument("--backend", choices=("aot_eager", "inductor", "all"), default="all")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--out", help="where the JSON goes (default benchmarks/results/validate_gpu[-cpu].json)")
    args = parser.parse_args(argv)
    import gpu_models
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("validate_gpu: needs a CUDA GPU; skipped (--device cpu runs it as a dry run)")
        return 0
    where = args.device
    small = where == "cpu"
    makers = {
        "resnet18": lambda: gpu_models.make_resnet18(where, batch=2, size=64) if small else gpu_models.make_resnet18(where),
        "gpt2": lambda: gpu_models.make_gpt2(where, batch=2, tokens=32) if small else gpu_models.make_gpt2(where),
    }  # fmt: skip
    backends = ["aot_eager", "inductor"] if args.backend == "all" else [args.backend]
    gpu = torch.cuda.get_device_name() if where == "cuda" else "CPU (dry run: CPU ops stand in for kernels)"
    parts: list[dict] = []
    results = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": gpu, "steps": args.steps,
               "complete": False, "parts": parts}  # fmt: skip
    name = "validate_gpu.json" if where == "cuda" else "validate_gpu-cpu.json"
    out = args.out or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results", name)
    for model in makers if args.model == "all" else [args.model]:
        for part in validate(model, makers[model], where, args.steps, backends):
            parts.append(part)
            write_json(results, out)  # what is done so far, in case the run is stopped before the end
            print(f"validate_gpu: {model}, {part['backend']} done in {part['seconds']:.0f} s", flush=True)
    results["complete"] = True
    print(render(results))
    write_json(results, out)
    print(f"wrote {out}")
    return 0


def write_json(results: dict, path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as handle:
        json.dump(results, handle, indent=2)


if __name__ == "__main__":
    sys.exit(main())
