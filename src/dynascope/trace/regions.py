"""User regions: mark steps, epochs or any span so op events nest under them.

    with dynascope.region("step", step=i):          # context manager
        ...
    @dynascope.region("train", cat="pipeline")      # decorator (name defaults to the function's)
    def train(): ...

Regions cost two buffer appends; with no session recording they cost almost nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from dynascope.trace.buffers import emit, now_ns


class region:
    def __init__(self, name: str | None = None, cat: str = "region", **args: Any) -> None:
        if name is not None and not isinstance(name, str):
            raise TypeError(f"region name must be a string, got {type(name).__name__}")
        self.name = name
        self.cat = cat
        self.args = args

    def update(self, **args: Any) -> region:
        """Change the args recorded by this region's next events (e.g. the step number)."""
        self.args = {**self.args, **{k: v for k, v in args.items() if v is not None}}
        return self

    def __enter__(self) -> region:
        emit(("B", self.name or "region", self.cat, dict(self.args), now_ns()))
        return self

    def __exit__(self, *exc: Any) -> None:
        emit(("E", now_ns()))

    def __call__(self, fn: Callable) -> Callable:
        name = self.name or function_name(fn)
        cat, owner = self.cat, self

        @functools.wraps(fn)
        def wrapper(*a: Any, **kw: Any) -> Any:
            emit(("B", name, cat, dict(owner.args), now_ns()))
            try:
                return fn(*a, **kw)
            finally:
                emit(("E", now_ns()))

        return wrapper


def function_name(fn: Callable) -> str:
    """`Trainer.train_step` for a method, even one defined inside another function."""
    qualname = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or "region"
    return qualname.rsplit("<locals>.", 1)[-1]


def complete_event(name: str, cat: str, ts_us: int, dur_us: int, args: dict | None = None) -> None:
    """Record an event whose start and duration are already known (epoch microseconds)."""
    emit(("X", name, cat, int(ts_us), int(dur_us), args or {}))
