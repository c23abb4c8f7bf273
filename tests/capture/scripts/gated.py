"""A compiled model whose saved activations differ from eager's by a known amount: inductor recomputes the
gate's sigmoid in the backward, eager autograd keeps it (N x 32 float32 more in layer `gate`)."""

import torch

N = 256


class Gate(torch.nn.Module):
    def forward(self, h):
        return torch.sigmoid(h) * h


class Gated(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.gate, self.fc2 = torch.nn.Linear(16, 32), Gate(), torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(self.gate(self.fc1(x)))


model = torch.compile(Gated())
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(N, 16)
for _ in range(3):
    model(x).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
