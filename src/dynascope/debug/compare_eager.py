"""Did compiling pay off? `dynascope.compare_eager` times a function's compiled calls, then the same
calls with every torch.compile'd function run eagerly, and says so.

    result = dynascope.compare_eager(train_step, batch, calls=20)
    print(result)   # compiled 1.2 ms, eager 3.4 ms: compiled is 2.83x faster ...; repaid after 410 calls

`fn` is called `calls` times as it is (the first calls compile), then `calls` times under
torch.compiler.set_stance("force_eager") (torch 2.5.1, which has no stances: Dynamo's frame hook is
switched off instead). Each call is timed with the wall clock; a CUDA device is synchronised after each
call so that its time is the work, not its launch. Compiling's cost is what the compiled calls took
beyond their median: the first calls' compiles and warm-up, and any recompiles. The rule for the verdict,
and when the comparison is noisy, is analyze/payoff.py's, the same `dynascope run --compare-eager` uses.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dynascope import _torch
from dynascope.analyze.payoff import Sample, judge, sample
from dynascope.errors import ConfigError

__all__ = ["EagerComparison", "compare_eager"]


@dataclass
class EagerComparison:
    """What `compare_eager` found (times in µs)."""

    compiled: Sample  # the compiled calls, warm-up included (its median is the steady call)
    eager: Sample
    compile_us: float  # what the compiled calls took beyond their median: compiling and warming up
    speedup: float | None  # eager median / compiled median
    saving_us: float  # eager median - compiled median, per call
    breakeven_calls: int | None  # calls after which compiling is repaid (None: it is not)
    noisy: bool
    verdict: str

    def __str__(self) -> str:
        return (f"compiled {self.compiled.median / 1000:.3g} ms, eager {self.eager.median / 1000:.3g} ms "
                f"(medians of {self.compiled.calls} and {self.eager.calls} calls): {self.verdict}")  # fmt: skip


def compare_eager(fn: Callable[..., Any], *args: Any, calls: int = 20, **kwargs: Any) -> EagerComparison:
    """Call `fn(*args, **kwargs)` `calls` times compiled, then `calls` times with every compiled function
    run eagerly, timing each call; whether compiling paid off (module docstring)."""
    if not callable(fn):
        raise ConfigError(f"compare_eager needs a function to call, got {type(fn).__name__}")
    if type(calls) is not int or calls < 2:
        raise ConfigError(f"calls={calls!r}: give a whole number of calls, 2 or more (20 or more for a clear verdict)")
    _torch.require_torch()
    synchronize = _synchronizer()
    compiled = _timed(fn, args, kwargs, calls, synchronize)
    with _torch.force_eager():
        eager = _timed(fn, args, kwargs, calls, synchronize)
    mine, theirs = sample(compiled), sample(eager)
    assert mine is not None and theirs is not None  # calls >= 2
    compile_us = sum(max(0.0, t - mine.median) for t in compiled)
    found = judge(mine, theirs, compile_us)
    return EagerComparison(compiled=mine, eager=theirs, compile_us=compile_us, speedup=found["speedup"],
                           saving_us=found["saving_us"], breakeven_calls=found["breakeven_calls"],
                           noisy=found["noisy"], verdict=found["verdict"])  # fmt: skip


def _timed(fn: Callable[..., Any], args: tuple, kwargs: dict, calls: int,
           synchronize: Callable[[], None]) -> list[float]:  # fmt: skip
    times = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        fn(*args, **kwargs)
        synchronize()
        times.append((time.perf_counter_ns() - start) / 1000)
    return times


def _synchronizer() -> Callable[[], None]:
    """Wait for the device after a call, where the program uses CUDA (never on a CPU-only run)."""
    import torch

    if not torch.cuda.is_available():
        return lambda: None

    def synchronize() -> None:
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()

    return synchronize
