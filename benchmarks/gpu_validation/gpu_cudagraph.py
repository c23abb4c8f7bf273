"""CUDA graphs (mode="reduce-overhead") under dynascope, on a GPU: does a training loop run, and does
each replay's event get the kernels its cudaGraphLaunch ran?

The loop of tests/capture/test_device.py's CUDA-graph test (a small MLP, `model(x).sum().backward()`
six times), in variants, each on a fresh Dynamo: plain torch.compile or traced by dynascope, with or
without `model.zero_grad(set_to_none=True)` before each step (without it, the next backward adds to
gradients that CUDA graph trees have since overwritten: torch refuses that, with or without dynascope). For each: whether it ran (else the
step and the error), and for the traced ones the device events, how many were joined to a launcher, and
the launchers' names. `--device cpu` is a dry run (no CUDA graphs there). Writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile


def mlp(where: str):
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(where)


def variant(where: str, traced: bool, zero_grad: bool, out: str) -> dict:
    import polars as pl
    import torch

    import dynascope

    torch._dynamo.reset()
    backend = dynascope.backend(inner="inductor") if traced else "inductor"
    model = torch.compile(mlp(where), backend=backend, mode="reduce-overhead")
    result: dict = {"traced": traced, "zero_grad": zero_grad, "ran": True}
    step = -1
    try:
        with dynascope.session(os.path.join(out, "run.pfw.gz")) if traced else _nothing():
            for step in range(6):
                if zero_grad:
                    model.zero_grad(set_to_none=True)
                with dynascope.region("step", step=step) if traced else _nothing():
                    model(torch.randn(64, 16, device=where)).sum().backward()
            if where == "cuda":
                torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - the probe reports what broke
        result |= {"ran": False, "step": step, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    if traced and os.path.isdir(out) and any(name.endswith(".pfw.gz") for name in os.listdir(out)):
        frame = dynascope.read_trace(out)
        gpu = frame.filter(pl.col("cat") == "gpu")
        ops = frame.filter(pl.col("cat") == "dynamo")
        result["ops"] = sorted(set(ops.get_column("name").cast(pl.String).to_list()))[:10] if ops.height else []
        result["device_events"] = gpu.height
        if "launcher" in gpu.columns:
            joined = gpu.filter(pl.col("launcher").is_not_null())
            result["joined"] = joined.height
            result["launchers"] = sorted(set(joined.get_column("launcher").cast(pl.String).to_list()))
            result["joined_us"] = float(joined.get_column("dur").sum() or 0)
        result["device_us"] = float(gpu.get_column("dur").sum() or 0) if gpu.height else 0.0
    return result


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--out", default="gpu_cudagraph.json")
    args = parser.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_cudagraph: needs a CUDA GPU; skipped (--device cpu runs it as a dry run)")
        return 0
    results = []
    for traced, zero_grad in ((False, False), (False, True), (True, True)):
        with tempfile.TemporaryDirectory() as out:
            results.append(variant(args.device, traced, zero_grad, out))
        print(json.dumps(results[-1]), flush=True)
        with open(args.out, "w") as handle:
            json.dump({"torch": torch.__version__, "variants": results}, handle, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
