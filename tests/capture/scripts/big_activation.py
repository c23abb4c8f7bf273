"""A training loop whose forward keeps one big activation for the backward: ReLU's output, N x WIDE float32
(128 MiB), above glibc's mmap threshold, so the process's resident memory follows it exactly."""

import torch

N, WIDE = 4096, 8192


class Wide(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wide = torch.nn.Linear(64, WIDE)
        self.act = torch.nn.ReLU()
        self.head = torch.nn.Linear(WIDE, 1)

    def forward(self, x):
        return self.head(self.act(self.wide(x)))


model = torch.compile(Wide(), backend="aot_eager")
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(N, 64)
for _ in range(3):
    model(x).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
