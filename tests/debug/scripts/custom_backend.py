"""A training step compiled with a custom backend that gets one op wrong (tests/debug/planted.py)."""

import planted
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.act = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(16, 2)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


torch.manual_seed(0)
net = Net()
model = torch.compile(net, backend=planted.perturb_relu_large)
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
for _step in range(3):
    optimizer.zero_grad()
    loss = model(torch.randn(4, 8)).pow(2).mean()
    loss.backward()
    optimizer.step()
print("loss", loss.item())
