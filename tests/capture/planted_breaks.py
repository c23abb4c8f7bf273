"""Models with graph breaks of known cost, for the graph-break cost tests (and as a script: `dynascope run`).

Each planted break is a `torch.compiler.disable`d helper that spins for a fixed time (a busy loop on the
wall clock), or a break whose own cost is tiny (`print`, `.item()`, a data-dependent `if`). A helper also
records how long it really ran (`SPUN`): on a loaded machine a spin can end late (descheduled when its
time is up), and that is time the break really cost. The line numbers the tests look for are found by the
text of the line.
"""

from __future__ import annotations

import inspect
import io
import json
import sys
import time

import torch

SINK = io.StringIO()  # where the planted print writes
SPUN: dict[str, list[float]] = {}  # helper name -> how long each of its calls really spun (µs)


def spin(ms: float, who: str) -> None:
    start = time.perf_counter()
    end = start + ms / 1000
    while time.perf_counter() < end:
        pass
    SPUN.setdefault(who, []).append((time.perf_counter() - start) * 1e6)


def spun(who: str, last: int) -> float:
    """The mean time the last `last` calls of helper `who` really spun (µs)."""
    times = SPUN[who][-last:]
    return sum(times) / len(times)


@torch.compiler.disable
def slow_helper(x, ms):
    spin(ms, "slow_helper")
    return x


@torch.compiler.disable
def other_helper(x, ms):
    spin(ms, "other_helper")
    return x


class DisabledHelper(torch.nn.Module):
    """One break: a disabled helper spinning `ms` milliseconds between two layers."""

    def __init__(self, ms=8.0):
        super().__init__()
        self.ms = ms
        self.a = torch.nn.Linear(16, 16)
        self.b = torch.nn.Linear(16, 16)

    def forward(self, x):
        x = self.a(x).relu()
        x = slow_helper(x, self.ms)  # planted: disabled helper
        return self.b(x)


class TwoBreaks(torch.nn.Module):
    """Two breaks of different cost in one forward: 8 ms, then 20 ms (long enough that the time a loaded machine
    adds around a break, outside the helper's own measured spin, stays well inside the tests' 20%)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 16)
        self.b = torch.nn.Linear(16, 16)
        self.c = torch.nn.Linear(16, 16)

    def forward(self, x):
        x = self.a(x)
        x = other_helper(x, 8.0)  # planted: the cheap break
        x = self.b(x)
        x = slow_helper(x, 20.0)  # planted: the costly break
        return self.c(x)


class SmallBreaks(torch.nn.Module):
    """A print, an .item() and a data-dependent branch: breaks whose own work is tiny."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 16)
        self.b = torch.nn.Linear(16, 16)

    def forward(self, x):
        x = self.a(x)
        print("step", file=SINK)  # planted: print
        n = (x.abs() >= 0).sum().item()  # planted: item (the same value each call: no recompiles)
        if x.mean() > -100:  # planted: branch
            x = x * 2
        return self.b(x) / (1 + n)


class Block(torch.nn.Module):
    def __init__(self, ms):
        super().__init__()
        self.ms = ms
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x):
        x = self.lin(x)
        x = slow_helper(x, self.ms)  # planted: break in each block
        return x.relu()


class LoopOfBlocks(torch.nn.Module):
    """The user's loop over blocks, each with a break: the break is hit once per block and call (and
    Dynamo, unable to resume inside the loop, runs this forward eagerly)."""

    def __init__(self, blocks=3, ms=6.0):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(ms) for _ in range(blocks))
        self.head = torch.nn.Linear(16, 16)

    def forward(self, x):
        for block in self.blocks:  # planted: loop
            x = block(x)
        return self.head(x)


class HelperLayer(torch.nn.Module):
    """A layer that calls the disabled helper: a break inside a torch.nn.Sequential's loop."""

    def __init__(self, ms=4.0):
        super().__init__()
        self.ms = ms

    def forward(self, x):
        return slow_helper(x, self.ms)


def stacked(helper_ms=None):
    """torch.nn's own container (Dynamo compiles torch's wrapper frame around it, not Sequential.forward);
    with `helper_ms`, a HelperLayer between its layers."""
    helper = [HelperLayer(helper_ms)] if helper_ms is not None else [torch.nn.ReLU()]
    return torch.nn.Sequential(torch.nn.Linear(16, 16), *helper, torch.nn.Linear(16, 16))


def scale(x, n):
    y = x * n  # planted: guard on n
    return y + 1


def line_of(obj, marker: str) -> int:
    """The line of `obj`'s source holding `# planted: <marker>`."""
    lines, start = inspect.getsourcelines(obj)
    for offset, text in enumerate(lines):
        if f"# planted: {marker}" in text:
            return start + offset
    raise AssertionError(f"no line marked {marker!r} in {obj}")


if __name__ == "__main__":  # `dynascope run planted_breaks.py [model] [calls]`: a training loop
    name = sys.argv[1] if len(sys.argv) > 1 else "TwoBreaks"
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    model = torch.compile(globals()[name](), backend="aot_eager")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 16)
    for _ in range(calls):
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
    print("spun " + json.dumps(SPUN))  # what each helper really took, call by call (µs)
