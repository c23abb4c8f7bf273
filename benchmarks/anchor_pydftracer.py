"""pydftracer's per-op overhead on the capture benchmark's model, for comparison.

Runs in a separate virtualenv that has pydftracer (its `dftracer` package shares our drop-in's import
name, so it can never live in dynascope's environment):

    python3 -m venv /tmp/anchor && /tmp/anchor/bin/pip install torch==2.13.0 'pydftracer[dynamo]'
    DFTRACER_ENABLE=1 /tmp/anchor/bin/python benchmarks/anchor_pydftracer.py

Prints one JSON line: baseline (aot_eager) and pydftracer µs per call, ops per call, µs per op.
"""

import json
import os
import statistics
import sys
import tempfile
import time

import torch

os.environ.setdefault("DFTRACER_ENABLE", "1")
from dftracer.python import dftracer  # pydftracer's, in its own venv
from dftracer.python.dynamo import create_backend


def make_model():
    torch.manual_seed(0)
    layers = []
    for _ in range(20):
        layers += [torch.nn.Linear(16, 16), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def timed(model, x, calls, best):
    with torch.no_grad():
        for _ in range(20):
            model(x)
        runs = []
        for _ in range(best):
            start = time.perf_counter()
            for _ in range(calls):
                model(x)
            runs.append((time.perf_counter() - start) / calls)
    return min(runs)


def main():
    calls, best, repeats = 1000, 5, 5
    torch.set_num_threads(1)
    x = torch.randn(8, 16)
    workdir = tempfile.mkdtemp()
    logger = dftracer.initialize_log(os.path.join(workdir, "anchor.pfw"), workdir, -1)
    base_model = torch.compile(make_model(), backend="aot_eager")
    traced_model = torch.compile(make_model(), backend=create_backend(name="anchor", autograd=True))
    base, traced = [], []
    for _ in range(repeats):
        base.append(timed(base_model, x, calls, best))
        traced.append(timed(traced_model, x, calls, best))
    started = time.perf_counter()
    logger.finalize()
    finalize_s = time.perf_counter() - started
    ops = 60  # the no_grad AOT inference graph: 20 x (t, addmm, relu)
    b, t = statistics.median(base), statistics.median(traced)
    print(json.dumps({
        "tool": "pydftracer", "baseline_us_per_call": b * 1e6, "traced_us_per_call": t * 1e6,
        "ops_per_call": ops, "us_per_op": (t - b) / ops * 1e6, "finalize_s": finalize_s,
    }))


if __name__ == "__main__":
    sys.exit(main())
