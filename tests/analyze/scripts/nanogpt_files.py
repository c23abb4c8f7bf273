"""A nanoGPT-style training loop for the file I/O tests (tests/analyze/test_files_real_run.py): token data
written with numpy and read back through a fresh np.memmap per batch (as nanoGPT's get_batch does), a
meta file read with pickle, packages imported lazily inside the loop, a tiny model compiled with the
backend named on the command line, one `git --version` through a pipe, and a checkpoint torch.save'd at
the end. Fake data, CPU, a few steps."""

import argparse
import os
import pickle
import subprocess
import sys

import numpy as np
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
parser.add_argument("--backend", default="aot_eager")
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--pipe", action="store_true", help="also read a child's output through a pipe")
args = parser.parse_args()

os.makedirs(args.data, exist_ok=True)
val = os.path.join(args.data, "val.bin")
tokens = np.random.default_rng(0).integers(0, 64, size=1 << 15, dtype=np.uint16)
tokens.tofile(val)
with open(os.path.join(args.data, "meta.pkl"), "wb") as f:
    pickle.dump({"vocab_size": 64}, f)
with open(os.path.join(args.data, "meta.pkl"), "rb") as f:
    vocab = pickle.load(f)["vocab_size"]


def get_batch(bs: int = 8, block: int = 16) -> torch.Tensor:
    data = np.memmap(val, dtype=np.uint16, mode="r")  # nanoGPT recreates the memmap every batch
    ix = torch.randint(len(data) - block, (bs,))
    return torch.stack([torch.from_numpy(data[i : i + block].astype(np.int64)) for i in ix])


model = torch.nn.Sequential(torch.nn.Embedding(vocab, 16), torch.nn.Flatten(), torch.nn.Linear(256, vocab))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
compiled = torch.compile(model, backend=args.backend)
for step in range(args.steps):
    if step == 1:
        import email.mime.text  # noqa: F401  lazy imports, as training scripts do
        import json  # noqa: F401
    x = get_batch()
    loss = compiled(x).logsumexp(-1).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
if args.pipe:
    with subprocess.Popen([sys.executable, "-c", "print('x' * 100)"], stdout=subprocess.PIPE) as child:
        assert child.stdout is not None
        child.stdout.read()
torch.save({"model": model.state_dict(), "steps": args.steps}, os.path.join(args.data, "ckpt.pt"))
print("loss", float(loss.detach()))
