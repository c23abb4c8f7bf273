"""Compiled DDP training written the way people write it: the many-ranks tests run it under torchrun
(gloo, CPU) with and without dynascope. It knows nothing of dynascope.

    torchrun --nproc_per_node=2 ddp_train.py [--backend aot_eager|inductor] [--wrap inside|outside]
        [--steps N] [--bucket-cap-mb MB] [--straggle STEP:RANK:SECONDS] [--diverge STEP:RANK]
        [--hang STEP:RANK] [--metric] [--functional] [--pg-timeout S]

--wrap inside: DDP(torch.compile(model)); outside: torch.compile(DDP(model)).
--straggle: that rank sleeps before that step's backward.  --diverge: that rank's batch is smaller from
that step on (it alone recompiles).  --hang: that rank never reaches that step's metric all-reduce (it
waits in its data loading instead) until the job is stopped.  --metric: an explicit all-reduce of the
loss every step.  --functional: a compiled function with collectives in it, every step.
"""

import argparse
import datetime
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def pair(text, n):
    parts = list(text.split(":")) if text else []
    return tuple(float(p) if "." in p else int(p) for p in parts) if len(parts) == n else None


class Net(nn.Module):
    def __init__(self, width=512, depth=4):
        super().__init__()
        self.layers = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(depth)])
        self.head = nn.Linear(width, 10)

    def forward(self, x):
        return self.head(self.layers(x))


def batches(rank, steps, batch, width, diverge, hang):
    g = torch.Generator().manual_seed(rank)
    for step in range(steps):
        if hang and step == hang[0] and rank == hang[1]:
            while True:  # a data source that never answers
                time.sleep(0.1)
        n = batch // 2 if diverge and step >= diverge[0] and rank == diverge[1] else batch
        yield torch.randn(n, width, generator=g), torch.randint(0, 10, (n,), generator=g)


@torch.compile
def reduce_stats(x, group):
    total = x.sum()
    dist.all_reduce(total, group=group)
    import torch.distributed._functional_collectives as funcol

    spread = funcol.all_reduce(x.max(), "max", group)
    return total / dist.get_world_size(group), spread


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="aot_eager")
    parser.add_argument("--wrap", choices=("inside", "outside"), default="inside")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--bucket-cap-mb", type=float, default=1.0)
    parser.add_argument("--straggle", default="")
    parser.add_argument("--diverge", default="")
    parser.add_argument("--hang", default="")
    parser.add_argument("--metric", action="store_true")
    parser.add_argument("--functional", action="store_true")
    parser.add_argument("--pg-timeout", type=float, default=600)
    args = parser.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.pg_timeout))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = Net(args.width)
    if args.wrap == "inside":
        model = DDP(torch.compile(model, backend=args.backend), bucket_cap_mb=args.bucket_cap_mb)
    else:
        model = torch.compile(DDP(model, bucket_cap_mb=args.bucket_cap_mb), backend=args.backend)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    straggle, diverge, hang = pair(args.straggle, 3), pair(args.diverge, 2), pair(args.hang, 2)
    metric = torch.zeros(())
    for step, (x, y) in enumerate(batches(rank, args.steps, args.batch, args.width, diverge, hang)):
        loss = nn.functional.cross_entropy(model(x), y)
        if straggle and step == straggle[0] and rank == straggle[1]:
            time.sleep(straggle[2])
        loss.backward()
        opt.step()
        opt.zero_grad()
        if args.metric or hang:
            metric = loss.detach().clone()
            dist.all_reduce(metric)
        if args.functional:
            reduce_stats(x, dist.group.WORLD)
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f} mean {metric.item() / dist.get_world_size():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
