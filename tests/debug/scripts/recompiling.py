"""Calls a compiled function with a new Python constant: it recompiles."""

import torch


@torch.compile(backend="eager")
def scale(x, factor):
    return x * factor + 1


print(scale(torch.ones(3), 2).sum().item())
print(scale(torch.ones(3), 5).sum().item())
