"""A training loop that evaluates and saves a checkpoint inside a step (issue 25, defect 4): a small CNN
compiled with aot_eager, a DataLoader with 2 workers over a TensorDataset, and every few steps, after the
batch arrives and before the training forward, an evaluation pass under torch.no_grad (model.eval()) and a
torch.save checkpoint. Prints one JSON line saying what it did. Tracing comes from outside (dynascope run)."""

import argparse
import json
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--every", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(128, 10)
    )
    compiled = torch.compile(model, backend="aot_eager")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    n = 8 * args.steps
    train = DataLoader(TensorDataset(torch.randn(n, 3, 16, 16), torch.randint(0, 10, (n,))), batch_size=8,
                       num_workers=args.workers)  # fmt: skip
    val = [torch.randn(8, 3, 16, 16) for _ in range(2)]
    extra = torch.randn(1_000_000)  # a checkpoint of some MB, so that saving it takes a few ms
    os.makedirs(args.out, exist_ok=True)
    evaluated, saved = [], []
    for step, (x, y) in enumerate(train):
        if step % args.every == args.every - 1:
            model.eval()
            with torch.no_grad():
                for v in val:
                    compiled(v)
            model.train()
            path = os.path.join(args.out, f"ckpt-{step}.pt")
            torch.save({"model": model.state_dict(), "extra": extra}, path)
            evaluated.append(step)
            saved.append(path)
        loss = nn.functional.cross_entropy(compiled(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    print(json.dumps({"steps": args.steps, "evaluated": evaluated, "saved": saved}))


if __name__ == "__main__":
    main()
