"""Models for the compile-profile tests: one user function that is slow for Dynamo to trace (a Python
loop it unrolls), one quick one, and a module that breaks its graph and recompiles on a constant."""

import torch


def slow_to_trace(x):
    for i in range(150):
        x = x + i  # SLOW LINE: Dynamo traces this 150 times
    return x


def quick(x):
    return x.relu()


def model(x):
    y = quick(x)
    y = slow_to_trace(y)
    return torch.nn.functional.gelu(y)


class Breaks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)

    def forward(self, x, scale):
        y = self.a(x)
        torch._dynamo.graph_break()  # BREAK LINE
        return self.b(y) * scale  # SCALE LINE


if __name__ == "__main__":
    torch.compile(model, backend="eager")(torch.randn(8))
