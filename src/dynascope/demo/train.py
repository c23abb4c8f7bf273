"""dynascope's built-in demo: a small ConvNet trained for a few steps on synthetic MNIST-shaped data.

It is an ordinary torch.compile training loop, with no dynascope code in it: a DataLoader, forward,
backward, optimizer, and a checkpoint saved at the end of each epoch. `dynascope demo` runs it under
`dynascope run`, which finds its steps, data waits and checkpoints by itself. The last batch of each
epoch is smaller (the DataLoader keeps it: no drop_last), so Dynamo recompiles once and the
explanation has a recompile to show.
"""

import argparse
import os
import shutil
import tempfile

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


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


def synthetic_dataset(steps: int, batch_size: int, seed: int = 0) -> TensorDataset:
    """Samples for `steps` batches a pass, the last one half full."""
    count = batch_size * (steps - 1) + max(batch_size // 2, 1)
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(count, 1, 28, 28, generator=generator)
    return TensorDataset(images, torch.randint(0, 10, (count,), generator=generator))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = ConvNet()
    compiled = torch.compile(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(synthetic_dataset(args.steps, args.batch_size), batch_size=args.batch_size)
    checkpoints = tempfile.mkdtemp(prefix="dynascope-demo-")
    try:
        for epoch in range(args.epochs):
            for images, labels in loader:
                optimizer.zero_grad()
                loss = F.cross_entropy(compiled(images), labels)
                loss.backward()
                optimizer.step()
            torch.save({"model": model.state_dict(), "epoch": epoch}, os.path.join(checkpoints, f"epoch-{epoch}.pt"))
            print(f"epoch {epoch}: loss {loss.item():.3f}")
    finally:
        shutil.rmtree(checkpoints, ignore_errors=True)


if __name__ == "__main__":
    main()
