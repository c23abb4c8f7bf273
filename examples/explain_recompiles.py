"""Recompiles and `why_recompile`: what makes Dynamo compile a function again, and how to ask first.

    python examples/explain_recompiles.py
    dynascope explain examples/explain_recompiles.py
"""

import torch

import dynascope


def scale(x, factor):
    return torch.tanh(x) * factor


def main() -> None:
    opt = torch.compile(scale, backend="eager")
    with dynascope.observe() as obs:
        opt(torch.randn(8), 2)                      # 0/0
        opt(torch.randn(8, dtype=torch.float64), 2)  # dtype changed: recompile
        opt(torch.randn(16), 2)                     # shape changed: recompile (dimension becomes dynamic)
        opt(torch.randn(8), 3)                      # a Python constant changed: recompile

    for rc in obs.recompiles:  # each failing cache entry, newest first
        print(f"{rc.compile_id} compiled because: " + "; ".join(f"{f.compile_id}: {f.reason}" for f in rc.failures))
    # Ask before calling: would these arguments hit a cache entry?
    print(dynascope.why_recompile(opt, torch.randn(8, dtype=torch.float16), 2))
    print(dynascope.why_recompile(opt, torch.randn(8), 3))


if __name__ == "__main__":
    main()
