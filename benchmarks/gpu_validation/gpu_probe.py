"""What torch's profiler (CUPTI) hands dynascope on this machine, raw: the facts the GPU join rests on.

For three small workloads on CUDA (eager aten ops, an inductor-compiled function whose Triton kernels
launch through the driver API, and a CUDA graph replayed with `torch.cuda.CUDAGraph`), it collects CUDA
activity exactly as dynascope does (`_torch.start_activity(cuda=True)`) and reports:

- which CPU-side calls there are (cudaLaunchKernel, cuLaunchKernel(Ex), cudaGraphLaunch, ...), on which
  thread id (dynascope's readings use `threading.get_native_id()`), and with which correlation ids;
- for the device activities, how many share a correlation id with a CPU-side call, by that call's name
  (the join needs every kernel to: a kernel of a graph replay with the cudaGraphLaunch's);
- whether the launch calls' start times, put on the trace's clock with `device.epoch_offset()`, fall
  inside the window the program read around them (the clock alignment the join needs).

Needs CUDA (`--device cpu` runs the eager part on CPU operator events, as a dry run). Writes JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections import Counter


def collect(fn, cuda: bool) -> dict:
    import torch

    from dynascope import _torch
    from dynascope.capture import device
    from dynascope.trace.buffers import now_ns

    if cuda:
        torch.cuda.synchronize()
    offset = device.epoch_offset()
    _torch.start_activity(cuda=cuda)
    before = now_ns()
    fn()
    after = now_ns()
    if cuda:
        torch.cuda.synchronize()
    acts = _torch.activities(_torch.stop_activity())
    tid = threading.get_native_id()
    cpu = [a for a in acts if not a.on_device]
    dev = [a for a in acts if a.on_device]
    calls = {a.correlation: a for a in cpu if a.correlation}
    joined: Counter = Counter()
    for a in dev:
        call = calls.get(a.correlation)
        joined[call.name if call else "(no CPU call with its correlation id)"] += 1
    launch_names = {"cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC", "cudaGraphLaunch"}
    launches = [a for a in cpu if a.name in launch_names or "Launch" in a.name]
    in_window = sum(before <= a.start_ns - offset <= after for a in launches)
    return {
        "native_tid": tid,
        "cpu_calls": dict(Counter(a.name for a in cpu).most_common(20)),
        "cpu_call_threads": dict(Counter(str(a.resource) for a in cpu).most_common(5)),
        "cpu_calls_on_this_thread": sum(a.resource == tid for a in cpu),
        "device_activities": len(dev),
        "device_kinds": dict(Counter(device.activity_kind(a.name) for a in dev)),
        "device_names": dict(Counter(a.name[:80] for a in dev).most_common(8)),
        "device_joined_by_call": dict(joined),
        "device_with_zero_correlation": sum(a.correlation == 0 for a in dev),
        "launch_calls": len(launches),
        "launch_calls_in_window": in_window,
        "window_us": (after - before) / 1e3,
        "launch_offsets_us": [round((a.start_ns - offset - before) / 1e3, 1) for a in launches[:5]],
        "sample": [vars(a) | {"name": a.name[:80]} for a in acts[:12]],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--out", default="gpu_probe.json")
    args = parser.parse_args(argv)
    import torch

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("gpu_probe: needs a CUDA GPU; skipped (--device cpu runs the eager part as a dry run)")
        return 0
    where = args.device
    a = torch.randn(512, 512, device=where)
    b = torch.randn(512, 512, device=where)

    def eager():
        for _ in range(5):
            torch.relu(a @ b).sum()

    results: dict = {"torch": torch.__version__, "cuda": torch.version.cuda,
                     "gpu": torch.cuda.get_device_name() if cuda else "CPU"}  # fmt: skip
    parts = {"eager": eager}
    if cuda:
        compiled = torch.compile(lambda x, y: torch.sigmoid(x * 2 + y).sum(dim=1), backend="inductor")
        compiled(a, b)  # compiles

        def triton():
            for _ in range(5):
                compiled(a, b)

        static = torch.randn(512, 512, device=where)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                torch.relu(static @ b)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = torch.relu(static @ b) * 2
        del out

        def replay():
            for _ in range(5):
                graph.replay()

        parts |= {"triton": triton, "cudagraph": replay}
    for name, fn in parts.items():
        try:
            results[name] = collect(fn, cuda)
        except Exception as exc:  # noqa: BLE001 - a probe reports what broke and goes on to the next part
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
        summary = {k: v for k, v in results[name].items() if k != "sample"}
        print(f"## {name}\n{json.dumps(summary, indent=1)}")
    with open(args.out, "w") as handle:
        json.dump(results, handle, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
