"""Programs whose recompiles and graph breaks torch first sees inside torch.nn's own code, run by
tests/cli/test_user_frames.py under `dynascope run` (aot_eager, CPU, a few steps).

    hf    a causal LM in the style of a Hugging Face model: its forward wears a decorator (functools.wraps,
          as transformers' `can_return_tuple`), calls a Python-side padding check that breaks the graph
          (`.item()`), and the batch size changes after three steps (a recompile on `input_ids`, which torch
          first guards inside nn.Embedding)
    conv  the demo's ConvNet in miniature: the last batch is smaller (a recompile torch first guards inside
          nn.Conv2d)
    lib   a model calling a helper of an installed package (written to a site-packages directory of its
          own) that breaks the graph inside the package (`.item()`)

    python scripts_user_frames.py hf|conv [STEPS]
"""

import functools
import os
import sys
import tempfile

import torch
import torch.nn.functional as F
from torch import nn


def can_return_tuple(func):
    @functools.wraps(func)
    def wrapper(self, *args, return_dict=True, **kwargs):
        output = func(self, *args, **kwargs)
        if not return_dict:
            output = tuple(output.values())
        return output

    return wrapper


class TinyLM(nn.Module):
    def __init__(self, vocab=50, dim=16):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.mlp = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab)

    def warn_if_padding(self, input_ids, attention_mask):
        if attention_mask is not None and bool((attention_mask == 0).all()):
            print("all padding")

    @can_return_tuple
    def forward(self, input_ids=None, attention_mask=None, labels=None):
        self.warn_if_padding(input_ids, attention_mask)
        hidden = self.wte(input_ids)
        hidden = torch.relu(self.mlp(hidden))
        logits = self.head(hidden)
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
        return {"loss": loss, "logits": logits}


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3)
        self.fc = nn.Linear(4 * 6 * 6, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        return self.fc(torch.flatten(x, 1))


def hf(steps):
    model = TinyLM()
    compiled = torch.compile(model, backend="aot_eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        batch = 4 if step < 3 else 2
        ids = torch.randint(1, 50, (batch, 8))
        out = compiled(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids)
        out["loss"].backward()
        opt.step()
        opt.zero_grad()


def conv(steps):
    model = ConvNet()
    compiled = torch.compile(model, backend="aot_eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        batch = 8 if step < steps - 1 else 4
        loss = F.cross_entropy(compiled(torch.randn(batch, 1, 8, 8)), torch.randint(0, 10, (batch,)))
        loss.backward()
        opt.step()
        opt.zero_grad()


LIBRARY = """
import torch


def normalize(x):
    scale = x.abs().max().item()
    return x / (scale + 1.0)
"""


def lib(steps):
    packages = os.path.join(tempfile.mkdtemp(), "site-packages")
    os.makedirs(packages)
    with open(os.path.join(packages, "helperlib.py"), "w") as fh:
        fh.write(LIBRARY)
    sys.path.insert(0, packages)
    import helperlib

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            x = helperlib.normalize(self.fc(x))
            return x.relu()

    compiled = torch.compile(Net(), backend="aot_eager")
    for _ in range(steps):
        compiled(torch.randn(4, 8)).sum().backward()


def sequential(steps):
    """torch.compile given an nn.Sequential: the frame Dynamo compiles is torch's own (its wrapper of the
    module), so a grad-mode recompile has no line of the user's in its guard, only the call below."""
    model = torch.compile(nn.Sequential(nn.Linear(8, 8), nn.ReLU()), backend="aot_eager")
    for _ in range(steps):
        with torch.no_grad():
            model(torch.randn(4, 8))  # the evaluation call
        model(torch.randn(4, 8)).sum().backward()  # the training call: grad mode changed, a recompile


if __name__ == "__main__":
    torch.manual_seed(0)
    {"hf": hf, "conv": conv, "lib": lib, "sequential": sequential}[sys.argv[1]](int(sys.argv[2]) if len(sys.argv) > 2 else 6)
