"""A plain training loop for the whole-step tests: a Dataset of torch.save'd samples read with open +
torch.load, DataLoaders, a compiled model, an optimizer, a checkpoint per epoch. Prints one JSON line
saying what it did. Tracing comes from outside (dynascope run), or --api session / dftracer."""

import argparse
import json
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SampleFiles(Dataset):
    def __init__(self, root: str, count: int) -> None:
        self.paths = [os.path.join(root, f"sample-{i}.pt") for i in range(count)]

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int):
        with open(self.paths[index], "rb") as handle:
            return torch.load(handle)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--context", default=None)
    parser.add_argument("--persistent", action="store_true")
    parser.add_argument("--loaders", type=int, default=1)
    parser.add_argument("--optimizer", default="sgd")
    parser.add_argument("--samples", type=int, default=12)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--crash-at", type=int, default=-1)
    parser.add_argument("--api", default="none", choices=["none", "session", "dftracer"])
    parser.add_argument("--trace", default=None)
    args = parser.parse_args()

    session = None
    if args.api == "session":
        import dynascope

        session = dynascope.session(args.trace)
    elif args.api == "dftracer":
        from dftracer.python import dftracer

        session = dftracer.initialize_log(args.trace, None, -1)

    torch.manual_seed(0)
    os.makedirs(args.data, exist_ok=True)
    for i in range(args.samples):
        torch.save((torch.randn(8), torch.tensor(i % 3)), os.path.join(args.data, f"sample-{i}.pt"))
    loaders = [
        DataLoader(SampleFiles(args.data, args.samples), batch_size=args.batch, num_workers=args.workers,
                   multiprocessing_context=args.context if args.workers else None,
                   persistent_workers=args.persistent and args.workers > 0)
        for _ in range(args.loaders)
    ]  # fmt: skip
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    compiled = torch.compile(model, backend="aot_eager")
    optimizer = (
        torch.optim.Adam(model.parameters())
        if args.optimizer == "adam"
        else torch.optim.SGD(model.parameters(), lr=0.1)
    )
    steps = batches = 0
    for epoch in range(args.epochs):
        for loader in loaders:
            for x, y in loader:
                batches += 1
                if steps == args.crash_at:
                    raise RuntimeError(f"planted crash at step {steps}")
                optimizer.zero_grad()
                loss = nn.functional.cross_entropy(compiled(x), y)
                loss.backward()
                optimizer.step()
                steps += 1
        torch.save(model.state_dict(), os.path.join(args.data, f"checkpoint-{epoch}.pt"))
    print(json.dumps({"steps": steps, "batches": batches, "samples_read": args.samples * args.epochs * args.loaders,
                      "saved": args.samples + args.epochs, "passes": args.epochs * args.loaders, "epochs": args.epochs}))  # fmt: skip
    if session is not None:
        session.finalize()


if __name__ == "__main__":
    main()
