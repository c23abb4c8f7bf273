"""Which tracing backend `dynascope run` gives each torch.compile in a script it did not write: the
backend the script asked for, traced (inductor: its kernels; eager and aot_eager: each op), or the one
`--backend` names; a backend dynascope cannot trace runs as asked, with one note."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

from dynascope.console import say

BACKEND_CHOICES = ("auto", "aot_eager", "eager", "inductor")


def _substitute(requested: Any, choice: str, record_shapes: bool, notes: list[str]) -> Any:
    """The backend to give torch.compile instead of `requested`."""
    from dynascope.capture.backend import TracingBackend

    if isinstance(requested, TracingBackend):
        return requested
    name = requested if isinstance(requested, str) else getattr(requested, "compiler_name", None)
    if choice == "inductor":
        return TracingBackend(inner="inductor", record_shapes=record_shapes)
    if choice == "eager" or (choice == "auto" and name == "eager"):
        return TracingBackend(autograd=False, record_shapes=record_shapes)
    if choice == "aot_eager" or (choice == "auto" and name == "aot_eager"):
        return TracingBackend(autograd=True, record_shapes=record_shapes)
    if name in (None, "inductor"):  # what the script runs: inductor's kernels (--backend aot_eager: ATen ops)
        return TracingBackend(inner="inductor", record_shapes=record_shapes)
    _note_once(
        notes, f"backend {name!r} is not traced (dynascope traces eager, aot_eager and inductor); it runs as asked"
    )
    return requested


def _note_once(notes: list[str], text: str) -> None:
    if text not in notes:
        notes.append(text)
        say("run", f"note: {text}")


@contextlib.contextmanager
def tracing_compiles(choice: str, record_shapes: bool, notes: list[str]) -> Iterator[None]:
    """Make every torch.compile call in the block use a tracing backend."""
    import torch

    original = torch.compile

    @functools.wraps(original)
    def traced_compile(model: Any = None, *args: Any, backend: Any = "inductor", mode: Any = None,
                       options: Any = None, **kwargs: Any) -> Any:  # fmt: skip
        chosen = _substitute(backend, choice, record_shapes, notes)
        # mode/options reach the tracing backend, which hands them to inductor (or says once they do not apply)
        return original(model, *args, backend=chosen, mode=mode, options=options, **kwargs)

    torch.compile = traced_compile
    try:
        yield
    finally:
        torch.compile = original
