"""Collectives as a program issues them (explicit calls, DDP buckets, a compiled function with a collective),
for the collective-event tests: run under torchrun (gloo, CPU) with or without a dynascope session.

    torchrun --nproc_per_node=2 collectives.py OUT [--trace] [--explicit] [--ddp STEPS] [--bucket-cap-mb MB]
        [--user-hook] [--builtin-hook] [--compiled] [--backend aot_eager] [--wrap inside|outside]

--trace: a dynascope session per rank, OUT/trace-rank<R>.  --explicit: one of each explicit collective.
--ddp: that many compiled DDP training steps; the trained parameters go to OUT/params-rank<R>.pt.
--user-hook: a comm hook of the program's own (allreduce_hook, counting its calls into OUT/hook-rank<R>.txt).
--fsdp N: N compiled FSDP2 (fully_shard, per layer and the root) training steps.
--block: rank 1 blocks in a barrier rank 0 never joins (the test stops it).
--compiled: a compiled function calling dist.all_reduce; Dynamo's graph and break counts go to
OUT/dynamo-rank<R>.json.
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch import nn


class Net(nn.Module):
    def __init__(self, width=512, depth=3):
        super().__init__()
        self.layers = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(depth)])
        self.head = nn.Linear(width, 10)

    def forward(self, x):
        return self.head(self.layers(x))


def explicit(rank, world):
    t = torch.full((256,), float(rank + 1))  # 1024 bytes
    dist.all_reduce(t)
    work = dist.all_reduce(torch.ones(64), async_op=True)  # 256 bytes
    work.wait()
    dist.all_gather_into_tensor(torch.empty(32 * world), torch.ones(32))  # 128 bytes in
    dist.reduce_scatter_tensor(torch.empty(16), torch.ones(16 * world))  # 64 * world bytes in
    dist.broadcast(torch.ones(8), src=0)  # 32 bytes
    dist.barrier()
    dist.all_to_all_single(torch.empty(4 * world), torch.ones(4 * world))  # 16 * world bytes
    peer = 1 - rank
    if rank == 0:
        dist.send(torch.ones(10), dst=peer)  # 40 bytes
        work = dist.irecv(torch.empty(20), src=peer)  # 80 bytes
    else:
        dist.recv(torch.empty(10), src=peer)
        work = dist.isend(torch.ones(20), dst=peer)
    work.wait()
    ops = [dist.P2POp(dist.isend, torch.ones(6), peer), dist.P2POp(dist.irecv, torch.empty(6), peer)]  # 48 bytes
    for request in dist.batch_isend_irecv(ops):
        request.wait()
    assert t[0].item() == sum(range(1, world + 1))


def train(args, rank, out):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = Net()
    if args.wrap == "inside":
        ddp = DDP(torch.compile(model, backend=args.backend), bucket_cap_mb=args.bucket_cap_mb)
        step_model = ddp
    else:
        ddp = DDP(model, bucket_cap_mb=args.bucket_cap_mb)
        step_model = torch.compile(ddp, backend=args.backend)
    calls = [0]
    if args.user_hook:

        def hook(state, bucket):
            calls[0] += 1
            return default_hooks.allreduce_hook(state, bucket)

        ddp.register_comm_hook(dist.group.WORLD, hook)
    if args.builtin_hook:
        ddp._register_builtin_comm_hook(dist.BuiltinCommHookType.ALLREDUCE)
    opt = torch.optim.SGD(step_model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    for _ in range(args.ddp):
        x, y = torch.randn(16, 512, generator=g), torch.randint(0, 10, (16,), generator=g)
        loss = nn.functional.cross_entropy(step_model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
    if args.user_hook:
        with open(os.path.join(out, f"hook-rank{rank}.txt"), "w") as f:
            f.write(str(calls[0]))
    torch.save({n: p.detach().clone() for n, p in model.named_parameters()}, os.path.join(out, f"params-rank{rank}.pt"))


def fsdp(args, rank, out):
    from torch.distributed.device_mesh import init_device_mesh

    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # before 2.6 FSDP2 lived here
        from torch.distributed._composable.fsdp import fully_shard

    torch.manual_seed(0)
    model = Net()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model = torch.compile(model, backend=args.backend)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    for _ in range(args.fsdp):
        x, y = torch.randn(16, 512, generator=g), torch.randint(0, 10, (16,), generator=g)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()


def compiled(args, rank, out):
    from torch._dynamo.utils import counters

    @torch.compile(backend=args.backend)
    def stats(x):
        total = x.sum() * 2
        dist.all_reduce(total)
        dist.broadcast(total, src=0)
        return total.sin() + 1

    x = torch.ones(8)
    results = [stats(x).item() for _ in range(2)]
    figures = {
        "unique_graphs": counters["stats"]["unique_graphs"],
        "calls_captured": counters["stats"]["calls_captured"],
        "graph_breaks": sum(counters["graph_break"].values()),
        "frames": counters["frames"]["total"],
        "results": results,
    }
    with open(os.path.join(out, f"dynamo-rank{rank}.json"), "w") as f:
        json.dump(figures, f)


def block(rank, out):
    """After one all-reduce together, rank 1 blocks in a barrier that rank 0 never joins (rank 0 sleeps
    until the test stops it)."""
    dist.all_reduce(torch.ones(32))  # 128 bytes, the group's first collective
    if rank == 0:
        time.sleep(120)
        return
    with open(os.path.join(out, "blocked"), "w") as f:
        f.write("1")
    dist.barrier()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("--explicit", action="store_true")
    parser.add_argument("--ddp", type=int, default=0)
    parser.add_argument("--bucket-cap-mb", type=float, default=1.0)
    parser.add_argument("--user-hook", action="store_true")
    parser.add_argument("--builtin-hook", action="store_true")
    parser.add_argument("--compiled", action="store_true")
    parser.add_argument("--fsdp", type=int, default=0)
    parser.add_argument("--block", action="store_true")
    parser.add_argument("--backend", default="aot_eager")
    parser.add_argument("--wrap", choices=("inside", "outside"), default="inside")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    session = None
    if args.trace:
        import dynascope

        session = dynascope.session(os.path.join(args.out, f"trace-rank{rank}.pfw"))
    if args.block:
        block(rank, args.out)
    if args.explicit:
        explicit(rank, world)
    if args.ddp:
        train(args, rank, args.out)
    if args.fsdp:
        fsdp(args, rank, args.out)
    if args.compiled:
        compiled(args, rank, args.out)
    if session is not None:
        session.finalize()
    if not args.block:
        # every rank done with its collectives before any tears gloo down: under load, a rank that destroyed
        # its group while the other still had gloo work in flight died of "terminate called without an active
        # exception" (SIGABRT), traced or not (after the session: the barrier is not one of the program's)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
