"""A training loop that runs out of memory inside its compiled forward, in layer `blocks.1`, at step 2: a
custom op (torch.library) that raises MemoryError there, as an allocation that fails would."""

import torch

STEP = {"now": 0}


@torch.library.custom_op("dynascope_test::allocate", mutates_args=())
def allocate(x: torch.Tensor, block: int) -> torch.Tensor:
    if STEP["now"] == 2 and block == 1:
        raise MemoryError("planted: cannot allocate 64 GB")
    return x.clone()


@allocate.register_fake
def _(x, block):
    return torch.empty_like(x)


class Block(torch.nn.Module):
    def __init__(self, index):
        super().__init__()
        self.index = index
        self.fc = torch.nn.Linear(32, 32)

    def forward(self, x, h):
        return torch.relu(self.fc(h)) + allocate(x, self.index)  # the allocation that fails


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(0), Block(1)])

    def forward(self, x):
        h = x
        for block in self.blocks:
            h = block(x, h)
        return h


model = torch.compile(Net(), backend="aot_eager")
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
for step in range(4):
    STEP["now"] = step
    model(torch.randn(16, 32)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
