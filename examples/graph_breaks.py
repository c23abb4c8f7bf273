"""A small training loop whose model breaks its graph three times, each at a cost you would not guess
from the code: a logging helper kept out of the graph, a `.item()` for a check, a data-dependent branch.

    dynascope run examples/graph_breaks.py                  # which line costs what, and what to change
    dynascope run --compare-eager examples/graph_breaks.py  # and whether compiling pays off at all
"""

import statistics

import torch

history: list[float] = []


@torch.compiler.disable
def log_activations(x):
    """Keep a running record of the activations (eagerly, on purpose)."""
    values = x.detach().flatten().tolist()
    history.append(statistics.fmean(values) + statistics.pstdev(values))
    return x


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.Sequential(*(torch.nn.Linear(64, 64) for _ in range(4)))
        self.head = torch.nn.Linear(64, 10)

    def forward(self, x):
        x = torch.relu(self.blocks(x))
        x = log_activations(x)
        peak = x.abs().max().item()
        if x.mean() > 0:
            x = x / (1 + peak)
        return self.head(x)


def main():
    torch.manual_seed(0)
    model = torch.compile(Net())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.randn(64, 64)
    target = torch.randint(0, 10, (64,))
    for step in range(20):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"step {step}: loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
