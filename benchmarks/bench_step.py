"""What the whole-step events cost (capture/training.py, trace/fileio.py): per event on the hot path, and
on a training step with I/O tracing on: the demo's loop, and one that reads a file per sample.

Per event: each traced entry point called on the smallest real input, with a session open (events
recorded) and with none (the originals, nothing installed), in interleaved blocks; added time per
event = the difference of the two medians (the writer thread's work on them included, as it shares the
GIL). Training step: the demo's ConvNet under torch.compile (inductor) in a loop of DataLoader next,
zero_grad, forward, backward, step and a periodic torch.save, over the demo's in-memory samples and over
a dataset that opens and torch.loads one file per sample; traced = dynascope's inductor backend plus a
session (kernel, step and I/O events), untraced = plain torch.compile; interleaved blocks in one
process, median step time.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import torch
from common.results import publish
from torch.utils.data import DataLoader, Dataset

import dynascope
from dynascope.demo.train import ConvNet, synthetic_dataset

torch.set_num_threads(1)


def per_call_us(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - start) / calls / 1000


def entry_points(workdir: str) -> dict[str, Callable[[], Callable[[], object]]]:
    """Each kind of automatic event, as a factory of one call that records exactly one such event."""

    def optimizer_step():
        p = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.SGD([p], lr=0.1)  # no gradient: step() does next to nothing
        return opt.step

    def zero_grad():
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
        return opt.zero_grad

    def backward():
        x = torch.ones(1, requires_grad=True)
        return lambda: (x * 2).sum().backward()

    def dataloader_next():
        loader = DataLoader(range(10**7), batch_size=None)  # a range: no ten-million-item list on the heap
        it = iter(loader)
        return lambda: next(it)

    def torch_save():
        return lambda: torch.save(1, io.BytesIO())

    def file_read():
        path = os.path.join(workdir, "small.bin")
        with open(path, "wb") as handle:
            handle.write(b"x" * 4096)
        handle = open(path, "rb", buffering=0)  # noqa: SIM115 - read on and on, closed with the process
        return lambda: handle.seek(0) or handle.read(64)

    return {
        "optimizer.step": optimizer_step,
        "optimizer.zero_grad": zero_grad,
        "backward": backward,
        "dataloader.next": dataloader_next,
        "torch.save": torch_save,
        "read (POSIX)": file_read,
    }


def measure_events(args, workdir: str) -> list[dict]:
    rows = []
    for name, factory in entry_points(workdir).items():
        untraced, traced = [], []
        for repeat in range(args.repeats):
            for mode in ("untraced", "traced") if repeat % 2 == 0 else ("traced", "untraced"):
                session = dynascope.session(os.path.join(workdir, "events.pfw.gz")) if mode == "traced" else None
                call = factory()  # made under the mode, as a user's objects are
                call()
                (traced if session else untraced).append(per_call_us(call, args.calls))
                if session:
                    session.finalize()
        u, t = statistics.median(untraced), statistics.median(traced)
        rows.append({"event": name, "untraced_us": u, "traced_us": t, "added_us": t - u})
    return rows


class SampleFiles(Dataset):
    def __init__(self, root: str, count: int) -> None:
        torch.manual_seed(0)
        self.paths = []
        for i in range(count):
            path = os.path.join(root, f"sample-{i}.pt")
            torch.save((torch.randn(1, 28, 28), torch.tensor(i % 10)), path)
            self.paths.append(path)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int):
        with open(self.paths[index], "rb") as handle:
            return torch.load(handle)


class DemoLoop:
    def __init__(self, backend, dataset: Dataset, workdir: str, save_every: int) -> None:
        torch.manual_seed(0)
        self.model = ConvNet()
        self.compiled = torch.compile(self.model, backend=backend) if backend else torch.compile(self.model)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05)
        self.loader = DataLoader(dataset, batch_size=16)
        self.checkpoint = os.path.join(workdir, "checkpoint.pt")
        self.save_every = save_every
        self.batches = iter(())
        self.steps = 0

    def step(self) -> None:
        batch = next(self.batches, None)
        if batch is None:
            self.batches = iter(self.loader)
            batch = next(self.batches)
        images, labels = batch
        self.optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(self.compiled(images), labels)
        loss.backward()
        self.optimizer.step()
        self.steps += 1
        if self.steps % self.save_every == 0:
            torch.save(self.model.state_dict(), self.checkpoint)

    def block_ms(self, steps: int) -> float:
        start = time.perf_counter_ns()
        for _ in range(steps):
            self.step()
        return (time.perf_counter_ns() - start) / steps / 1e6


def measure_demo(args, workdir: str, dataset: Dataset, save_every: int) -> dict:
    path = os.path.join(workdir, "demo.pfw.gz")
    loops = {}
    session = dynascope.session(path)
    loops["traced"] = DemoLoop(dynascope.backend(inner="inductor"), dataset, workdir, save_every)
    loops["traced"].block_ms(5)  # compile and warm up, traced
    session.finalize()
    loops["untraced"] = DemoLoop(None, dataset, workdir, save_every)
    loops["untraced"].block_ms(5)
    times: dict[str, list[float]] = {"traced": [], "untraced": []}
    events_before = 0
    for repeat in range(args.repeats):
        for mode in ("untraced", "traced") if repeat % 2 == 0 else ("traced", "untraced"):
            session = dynascope.session(path) if mode == "traced" else None
            times[mode].append(loops[mode].block_ms(args.steps))
            if session:
                session.finalize()
                events_before += session.events_written
    u, t = statistics.median(times["untraced"]), statistics.median(times["traced"])
    return {
        "untraced_ms": u,
        "traced_ms": t,
        "ratio": t / u,
        "events_per_step": events_before / (args.repeats * args.steps),
        "steps_per_block": args.steps,
        "save_every": save_every,
    }


DEMO_CASES = (
    ("the demo's loop: in-memory samples, a checkpoint every 4 steps", "demo"),
    ("a sample file per item: open + torch.load per sample, 16 a step", "files"),
)


def render(results: dict) -> str:
    lines = [
        f"whole-step events, torch {torch.__version__}, {results['calls']} calls x {results['repeats']} repeats",
        "",
        "| event | untraced µs/call | traced µs/call | added µs/event |",
        "|---|---:|---:|---:|",
    ]
    for row in results["events"]:
        lines.append(f"| {row['event']} | {row['untraced_us']:.2f} | {row['traced_us']:.2f} | {row['added_us']:.2f} |")
    lines += [
        "",
        "| training step (ConvNet, inductor, SGD, I/O on) | untraced ms | traced ms | ratio | events/step |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, key in DEMO_CASES:
        demo = results[key]
        lines.append(f"| {label} | {demo['untraced_ms']:.2f} | {demo['traced_ms']:.2f} | {demo['ratio']:.3f} | "
                     f"{demo['events_per_step']:.0f} |")  # fmt: skip
    lines.append(f"(median of {results['repeats']} interleaved blocks of {results['demo']['steps_per_block']} steps)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "step.json"))
    args = parser.parse_args(argv)
    if args.quick:
        args.calls, args.repeats, args.steps = 2000, 3, 10
    from dynascope.trace import oplines

    oplines.warm_up()  # numba's formatter, loaded once here rather than by the first session's writer
    with tempfile.TemporaryDirectory() as workdir:
        results = {"calls": args.calls, "repeats": args.repeats, "torch": torch.__version__,
                   "events": measure_events(args, workdir),
                   "demo": measure_demo(args, workdir, synthetic_dataset(4, 16), save_every=4),
                   "files": measure_demo(args, workdir, SampleFiles(workdir, 16 * 8), save_every=20)}  # fmt: skip
    publish(render(results), results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
