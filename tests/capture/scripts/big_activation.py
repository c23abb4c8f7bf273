"""A training loop whose forward keeps one big activation for the backward: ReLU's output, N x WIDE float32
(128 MiB), above glibc's mmap threshold, so the process's resident memory follows it exactly. At step 3 it
runs out of memory inside the compiled forward, in layer `check`: a custom op (torch.library) raises
MemoryError there, as an allocation that fails would."""

import torch

N, WIDE = 4096, 8192
STEP = {"now": 0}


@torch.library.custom_op("dynascope_test::allocate", mutates_args=())
def allocate(x: torch.Tensor) -> torch.Tensor:
    if STEP["now"] == 3:
        raise MemoryError("planted: cannot allocate 64 GB")
    return x.clone()


@allocate.register_fake
def _(x):
    return torch.empty_like(x)


class Check(torch.nn.Module):
    def forward(self, x):
        return allocate(x)  # the allocation that fails


class Wide(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wide = torch.nn.Linear(64, WIDE)
        self.act = torch.nn.ReLU()
        self.head = torch.nn.Linear(WIDE, 1)
        self.check = Check()

    def forward(self, x):
        return self.head(self.act(self.wide(x))) + self.check(x[:, :1])


model = torch.compile(Wide(), backend="aot_eager")
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(N, 64)
for step in range(4):
    STEP["now"] = step
    model(x).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
