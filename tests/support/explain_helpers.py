"""Functions compiled by the explain tests (a real module file, so Dynamo sees real source lines)."""

import torch


def toy_example(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


def toy_print(a, b):
    x = a / (torch.abs(a) + 1)
    print("woo")
    return x * b


def two_breaks(a, b):
    x = a / (torch.abs(a) + 1)
    print("woo")
    if b.sum() < 0:
        b = b * -1
    return x * b


def scale(x, n):
    return x * n


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)
        )
        self.norm = torch.nn.LayerNorm(4)

    def forward(self, x):
        return self.norm(self.layers(x)).tanh()


def line_of(fn, text):
    """Absolute line number of the first source line of fn containing text."""
    import inspect

    lines, start = inspect.getsourcelines(fn)
    for i, line in enumerate(lines):
        if text in line:
            return start + i
    raise AssertionError(f"{text!r} not in {fn.__name__}")


def assert_backend(expl, entry, name):
    """The entry names its backend; torch before 2.10 records none, and the report says so in one note."""
    from dynascope import _torch

    if _torch.torch_at_least(2, 10):
        assert entry.backend == name
    else:
        assert entry.backend is None
        assert [n for n in expl.notes if "backend names: not available on torch" in n] != []
