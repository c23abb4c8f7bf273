"""A small model-serving loop: one model compiled once, requests of changing batch sizes.

Requests arrive with different numbers of rows (a batcher that takes whatever is queued), so the
compiled model sees a new batch size after the first request: TorchDynamo recompiles once and then
serves every later size from a dynamic-shape graph. Each request runs under torch.inference_mode and
its latency is printed.

    python inference_loop.py --requests 12 --hidden 64 --max-batch 8
"""

import argparse
import random
import statistics
import time

import torch
from torch import nn


class Classifier(nn.Module):
    def __init__(self, features: int, hidden: int, classes: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(features, hidden),
            nn.GELU(),
            nn.LayerNorm(hidden),
            nn.Linear(hidden, hidden),
            nn.GELU(),
            nn.Linear(hidden, classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.net(x), dim=-1)


def request_stream(count: int, max_batch: int, features: int, seed: int):
    rng = random.Random(seed)
    sizes = [max_batch] + [rng.randint(1, max_batch) for _ in range(count - 1)]
    if count > 1 and sizes[1] == max_batch:
        sizes[1] = max(1, max_batch // 2)  # the second request always differs: a new shape
    generator = torch.Generator().manual_seed(seed)
    for request_id, size in enumerate(sizes):
        yield request_id, torch.randn(size, features, generator=generator)


def serve(model, requests):
    latencies = []
    for request_id, batch in requests:
        start = time.perf_counter()
        with torch.inference_mode():
            probs = model(batch)
            top = probs.argmax(dim=-1).tolist()
        latency = (time.perf_counter() - start) * 1000
        latencies.append(latency)
        print(f"request {request_id}: batch {batch.shape[0]:>2}  latency {latency:8.2f} ms  top {top[:4]}")
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=10)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    model = Classifier(args.features, args.hidden, args.classes).eval()
    model = torch.compile(model, backend=args.backend)
    latencies = serve(model, request_stream(args.requests, args.max_batch, args.features, args.seed))
    steady = latencies[2:] or latencies
    print(f"served {len(latencies)} requests: first {latencies[0]:.1f} ms, median after warm-up {statistics.median(steady):.2f} ms")


if __name__ == "__main__":
    main()
