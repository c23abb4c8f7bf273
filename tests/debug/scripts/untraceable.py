"""A model whose forward branches on a tensor's value: Dynamo cannot trace it with fullgraph=True."""

import torch


class Gate(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        if y.sum() > 0:  # data-dependent branch
            return y.relu()
        return y


model = torch.compile(Gate(), fullgraph=True)
print(model(torch.randn(2, 4)).shape)
