"""Compile-profile overhead: the compile time of a model with `dynascope.compile_profile()` on, against
the same compile without it (and with torch's own TORCH_COMPILE_DYNAMO_PROFILER, where torch has it),
in the same run, the variants interleaved round by round.

    python benchmarks/bench_compile_profile.py            # 5 rounds
    python benchmarks/bench_compile_profile.py --quick    # 2 rounds, inductor cases skipped

Each compile starts afresh: torch._dynamo.reset(), a new model, inductor's FX-graph and AOTAutograd
caches off, a garbage collection before each. Timed: the first call (forward, loss, backward), which
is where the compile happens. Reported, as ratios to the plain compile: the median CPU time of this
process and its finished children (steady while other work shares the machine) and the best wall time.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from common.results import publish
from torch import nn

import dynascope
from dynascope import _torch
from dynascope.demo.train import ConvNet


def mlp20() -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(20):
        layers += [nn.Linear(64, 64), nn.ReLU()]
    return nn.Sequential(*layers)


MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[], torch.Tensor]]] = {
    "demo ConvNet": (ConvNet, lambda: torch.randn(16, 1, 28, 28)),
    "20-layer MLP": (mlp20, lambda: torch.randn(16, 64)),
}


@contextlib.contextmanager
def plain() -> Iterator[None]:
    yield


@contextlib.contextmanager
def profiled() -> Iterator[None]:
    with dynascope.compile_profile():
        yield


@contextlib.contextmanager
def torch_profiler() -> Iterator[None]:
    with torch._dynamo.config.patch(dynamo_profiler=True), contextlib.redirect_stdout(io.StringIO()):
        yield


def _cpu() -> float:
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def compile_once(model_name: str, backend: str, variant: Callable[[], Any]) -> tuple[float, float]:
    make_model, make_input = MODELS[model_name]
    torch._dynamo.reset()
    torch.manual_seed(0)
    model, x = make_model(), make_input()
    compiled = torch.compile(model, backend=backend)
    gc.collect()  # else a full collection lands in every third compile or so, whichever variant it is
    with variant():
        t0, c0 = time.perf_counter(), _cpu()
        compiled(x).sum().backward()
        seconds, cpu = time.perf_counter() - t0, _cpu() - c0
    return seconds, cpu


def measure(model_name: str, backend: str, rounds: int) -> dict[str, Any]:
    variants: dict[str, Callable[[], Any]] = {"plain": plain, "dynascope": profiled}
    if _torch.has_dynamo_profiler():
        variants["torch Dynamo profiler"] = torch_profiler
    compile_once(model_name, backend, plain)  # warm-up: imports, first-time inductor set-up
    times: dict[str, list[float]] = {name: [] for name in variants}
    cpus: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(rounds):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for name in order:
            wall, cpu = compile_once(model_name, backend, variants[name])
            times[name].append(wall)
            cpus[name].append(cpu)
    base, base_cpu = statistics.median(times["plain"]), statistics.median(cpus["plain"])
    row = {"model": model_name, "backend": backend, "rounds": rounds, "plain_s": base, "plain_cpu_s": base_cpu,
           "plain_best_s": min(times["plain"]), "plain_all_s": times["plain"]}
    row["variants"] = {
        name: {"median_s": statistics.median(t), "ratio": statistics.median(t) / base, "all_s": t,
               "best_s": min(t), "best_ratio": min(t) / min(times["plain"]),
               "cpu_s": statistics.median(cpus[name]), "cpu_ratio": statistics.median(cpus[name]) / base_cpu}
        for name, t in times.items() if name != "plain"
    }  # fmt: skip
    return row


def render(results: dict[str, Any]) -> str:
    from common.markdown import compile_profile_table

    return compile_profile_table(results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="2 rounds, eager backend only")
    parser.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results", "compile_profile.json"))
    args = parser.parse_args(argv)
    rounds = 2 if args.quick else args.rounds
    torch.set_num_threads(1)
    backends = ["eager"] if args.quick else ["eager", "inductor"]
    results: dict[str, Any] = {"torch": torch.__version__, "python": sys.version.split()[0], "cases": []}
    with _torch.inductor_config_patch(fx_graph_cache=False), torch._functorch.config.patch(enable_autograd_cache=False):
        for backend in backends:
            for model_name in MODELS:
                results["cases"].append(measure(model_name, backend, rounds))
                print(f"  {model_name} ({backend}) done", file=sys.stderr)
    publish(render(results), results, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
