"""Synthetic stand-ins the seed examples assume exist (train_loader, MyModel, input_tensor)."""

import torch


def train_loader(batches=2, batch_size=4):
    generator = torch.Generator().manual_seed(0)
    return [
        (torch.randn(batch_size, 1, 28, 28, generator=generator), torch.randint(0, 10, (batch_size,), generator=generator))
        for _ in range(batches)
    ]


class MyModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))

    def forward(self, x):
        return self.layers(x)
