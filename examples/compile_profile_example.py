"""A model whose compile is slower than it should be, for `dynascope compile-profile`:

* `positional_mix` runs a Python loop that Dynamo unrolls while tracing (128 small ops per call);
* `forward` prints, which breaks the graph;
* `scale` is a Python number that changes between calls, so the code after the break recompiles.

    dynascope compile-profile examples/compile_profile_example.py --json profile.json --pstats profile.prof
"""

import torch
from torch import nn


def positional_mix(x):
    for i in range(64):
        x = x * 0.99 + 0.01 * i
    return x


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(32, 32)
        self.out = nn.Linear(32, 8)

    def forward(self, x, scale):
        x = torch.relu(self.inp(x))
        x = positional_mix(x)
        print("step")  # a graph break
        return self.out(x) * scale


if __name__ == "__main__":
    model = torch.compile(Model())
    for scale in (1.0, 0.5):
        model(torch.randn(16, 32), scale).sum().backward()
