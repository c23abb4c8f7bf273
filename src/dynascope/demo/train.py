"""dynascope's built-in demo: a small ConvNet trained for a few steps on synthetic MNIST-shaped data.

It is an ordinary torch.compile script, with no dynascope code in it: `dynascope demo` runs it
under `dynascope run`. The last batch of each epoch is smaller, as with a real DataLoader without
drop_last, so Dynamo recompiles once and the explanation has a recompile to show.
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.fc1 = nn.Linear(16 * 12 * 12, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        return self.fc2(x)


def synthetic_batches(steps: int, batch_size: int, generator: torch.Generator):
    for step in range(steps):
        size = batch_size if step < steps - 1 else batch_size // 2
        yield torch.randn(size, 1, 28, 28, generator=generator), torch.randint(0, 10, (size,), generator=generator)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    model = ConvNet()
    compiled = torch.compile(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    try:  # mark epochs and steps when dynascope is there; the script runs without it too
        from dynascope import region
    except ImportError:
        region = None
    for epoch in range(args.epochs):
        for step, (images, labels) in enumerate(synthetic_batches(args.steps, args.batch_size, generator)):
            span = region("step", epoch=epoch, step=step) if region else None
            if span:
                span.__enter__()
            optimizer.zero_grad()
            loss = F.cross_entropy(compiled(images), labels)
            loss.backward()
            optimizer.step()
            if span:
                span.__exit__(None, None, None)
        print(f"epoch {epoch}: loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
