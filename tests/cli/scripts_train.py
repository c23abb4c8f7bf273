"""An ordinary torch.compile script, with no dynascope in it: what `dynascope run` is for."""

import sys

import torch

model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
compiled = torch.compile(model)  # inductor by default
for _step in range(3):
    compiled(torch.randn(4, 8)).sum().backward()
if "--fail" in sys.argv:
    raise ValueError("bad batch")
if "--exit3" in sys.argv:
    sys.exit(3)
print("trained")
