"""Run one captured graph on its recorded inputs, eagerly or compiled by a stage, forward and (where
its inputs require grad) backward, and say how the result compares."""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Any

from dynascope.debug.bisect.compare import Mismatch, compare
from dynascope.debug.bisect.stages import Stage, controlled_randomness

_DIGITS = re.compile(r"\d+")


@dataclass
class Outcome:
    """What one run of a graph gave: its outputs and input gradients, or the exception it raised."""

    outputs: Any = None
    grads: Any = None
    error: BaseException | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None


def fresh_inputs(inputs: list) -> list:
    """Copies of recorded inputs, each a new leaf, so runs never share state: requires_grad as recorded,
    and a parameter stays an nn.Parameter (compilers treat parameters as static inputs: a bug may need it)."""
    return [fresh(value) for value in inputs]


def fresh(value: Any) -> Any:
    import torch

    if not isinstance(value, torch.Tensor):
        return value
    copied = value.detach().clone()
    if isinstance(value, torch.nn.Parameter):
        return torch.nn.Parameter(copied, requires_grad=value.requires_grad)
    return copied.requires_grad_(value.requires_grad) if copied.is_floating_point() else copied


def run(gm: Any, inputs: list, stage: Stage | None = None, backward: bool = True, seed: int = 0) -> Outcome:
    """Run `gm` on copies of `inputs`: eagerly (`stage` None) or compiled by the stage. With `backward`,
    gradients of the inputs that require grad, for seeded random cotangents of the outputs."""

    args = fresh_inputs(inputs)
    try:
        with controlled_randomness(seed), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the program's warnings were shown by its own run
            if stage is None:
                outputs = gm(*args)
            else:  # through torch.compile, as the program compiled it (not the backend called directly)
                import torch

                from dynascope.debug.bisect.graphs import standalone

                outputs = torch.compile(standalone(gm), backend=stage.backend, fullgraph=True)(*args)
            grads = _grads(outputs, args, seed) if backward else None
    except Exception as exc:  # noqa: BLE001 - the failure is the finding
        return Outcome(error=exc)
    return Outcome(_detached(outputs), grads)


def _grads(outputs: Any, args: list, seed: int) -> list | None:
    import torch

    from dynascope.debug.bisect.compare import flatten

    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    outs = [v for _, v in flatten(outputs) if isinstance(v, torch.Tensor) and v.requires_grad and v.is_floating_point()]
    if not leaves or not outs:
        return None
    generator = torch.Generator().manual_seed(seed + 1)
    cotangents = [torch.randn(o.shape, generator=generator, dtype=torch.float32).to(o.dtype) for o in outs]
    grads: list[Any] = list(torch.autograd.grad(outs, leaves, cotangents, allow_unused=True))
    return [g.detach() if isinstance(g, torch.Tensor) else None for g in grads]  # unused inputs: None


def _detached(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, (list, tuple)):
        return type(value)(_detached(v) for v in value) if not hasattr(value, "_fields") else value
    return value


def differs(expected: Outcome, actual: Outcome) -> Mismatch | None:
    """How `actual` disagrees with `expected` (outputs first, then input gradients), or None."""
    found = compare(expected.outputs, actual.outputs, "output")
    if found is None and expected.grads is not None:
        found = compare(expected.grads, actual.grads, "grad")
    return found


def root_error(exc: BaseException) -> BaseException:
    """The error a backend raised, out of Dynamo's wrapper for it (BackendCompilerFailed.inner_exception)."""
    inner = getattr(exc, "inner_exception", None)
    return root_error(inner) if isinstance(inner, BaseException) else exc


def same_error(reference: BaseException, other: BaseException | None) -> bool:
    """Whether `other` is the failure `reference` is (same type, same first line, numbers aside): what
    keeps a search pinned to the original error instead of drifting to another one."""
    if other is None:
        return False
    reference, other = root_error(reference), root_error(other)
    return type(other) is type(reference) and _DIGITS.sub("#", first_line(other)) == _DIGITS.sub(
        "#", first_line(reference)
    )


def first_line(exc: BaseException) -> str:
    text = str(root_error(exc)).strip()
    return text.splitlines()[0] if text else type(root_error(exc)).__name__
