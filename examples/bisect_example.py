"""A small training loop compiled with a buggy custom backend. Find the bug with:

    dynascope bisect examples/bisect_example.py
"""

import torch
from buggy_backend import buggy_backend


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3)
        self.fc = torch.nn.Linear(4 * 26 * 26, 10)

    def forward(self, x):
        x = torch.relu(self.conv(x))
        return self.fc(x.flatten(1))


torch.manual_seed(0)
net = Net()
model = torch.compile(net, backend=buggy_backend)
optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
for step in range(3):
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(torch.randn(8, 1, 28, 28)), torch.randint(0, 10, (8,)))
    loss.backward()
    optimizer.step()
    print(f"step {step}: loss {loss.item():.4f}")
