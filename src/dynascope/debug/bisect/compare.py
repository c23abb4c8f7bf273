"""Whether two results agree: nested outputs and gradients compared tensor by tensor, with tolerances
per dtype (printed in every report, so a user can judge them).

A compiled program is not bit-identical to eager (inductor fuses and reorders float arithmetic), so
results agree when |a - b| <= atol + rtol * |b| everywhere, as `torch.allclose` has it, with
tolerances loose enough for healthy reordering and tight enough for a wrong op.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# dtype name -> (rtol, atol)
TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-7),
    "float32": (1e-4, 1e-5),
    "float16": (1e-2, 1e-3),
    "bfloat16": (1.6e-2, 1e-2),
}
EXACT = (0.0, 0.0)  # integers and booleans must be equal


def tolerance(dtype: Any) -> tuple[float, float]:
    """(rtol, atol) for a torch dtype."""
    return TOLERANCES.get(str(dtype).removeprefix("torch."), EXACT)


@dataclass
class Mismatch:
    """Where two results differ first, and by how much."""

    path: str  # "output[0]", "grad[fc1.weight]"
    what: str  # "values", "shape", "dtype", "missing", "type", "nan"
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    rtol: float = 0.0
    atol: float = 0.0
    dtype: str = ""

    def describe(self) -> str:
        if self.what in ("missing", "extra"):
            return f"{self.path}: {'not computed' if self.what == 'missing' else 'computed only here'}"
        if self.what != "values":
            return f"{self.path}: {self.what} differs"
        return (f"{self.path}: max abs error {self.max_abs_err:.3g}, max rel error {self.max_rel_err:.3g} "
                f"({self.dtype}: rtol {self.rtol:g}, atol {self.atol:g})")  # fmt: skip


def flatten(value: Any, path: str = "output") -> list[tuple[str, Any]]:
    """(path, leaf) pairs of nested tuples, lists and dicts (dataclass-like outputs by their fields)."""
    if isinstance(value, (list, tuple)):
        return [pair for i, item in enumerate(value) for pair in flatten(item, f"{path}[{i}]")]
    if isinstance(value, dict):
        return [pair for key, item in value.items() for pair in flatten(item, f"{path}[{key!r}]")]
    if hasattr(value, "to_tuple") and callable(value.to_tuple):  # transformers' ModelOutput
        return flatten(value.to_tuple(), path)
    return [(path, value)]


def compare(expected: Any, actual: Any, path: str = "output") -> Mismatch | None:
    """The first leaf where `actual` does not agree with `expected`, or None."""
    left, right = flatten(expected, path), dict(flatten(actual, path))
    missing = [p for p, _ in left if p not in right]
    if missing:
        return Mismatch(missing[0], "missing")
    extra = [p for p in right if p not in dict(left)]
    if extra:
        return Mismatch(extra[0], "extra")
    worst: Mismatch | None = None
    for where, a in left:  # by path: gradients may arrive in another order
        found = _compare_leaf(where, a, right[where])
        if found is not None and found.what != "values":
            return found
        if found is not None and (worst is None or found.max_rel_err > worst.max_rel_err):
            worst = found
    return worst


def _compare_leaf(path: str, expected: Any, actual: Any) -> Mismatch | None:
    import torch

    if isinstance(expected, torch.Tensor) or isinstance(actual, torch.Tensor):
        if not (isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor)):
            return Mismatch(path, "type")
        return compare_tensors(path, expected, actual)
    if isinstance(expected, float) and isinstance(actual, float):
        return compare_tensors(
            path, torch.tensor(expected, dtype=torch.float64), torch.tensor(actual, dtype=torch.float64)
        )
    return None if expected == actual else Mismatch(path, "values" if type(expected) is type(actual) else "type")


def compare_tensors(path: str, expected: Any, actual: Any) -> Mismatch | None:
    import torch

    if expected.shape != actual.shape:
        return Mismatch(path, "shape")
    if expected.dtype != actual.dtype:
        return Mismatch(path, "dtype")
    if expected.is_sparse or actual.is_sparse:
        expected, actual = expected.to_dense(), actual.to_dense()
    rtol, atol = tolerance(expected.dtype)
    a, b = actual.detach().to("cpu"), expected.detach().to("cpu")
    if not (a.is_floating_point() or a.is_complex()):
        equal = torch.equal(a, b)
        return None if equal else Mismatch(path, "values", 1.0, 1.0, 0.0, 0.0, str(a.dtype).removeprefix("torch."))
    a64, b64 = a.to(torch.float64), b.to(torch.float64)
    nan_a, nan_b = torch.isnan(a64), torch.isnan(b64)
    if not torch.equal(nan_a, nan_b):
        return Mismatch(path, "nan", float("nan"), float("nan"), rtol, atol, str(a.dtype).removeprefix("torch."))
    diff = (a64 - b64).abs().masked_fill(nan_a, 0.0)
    if a64.numel() == 0 or bool((diff <= atol + rtol * b64.abs().masked_fill(nan_b, 0.0)).all()):
        return None
    rel = diff / b64.abs().clamp_min(atol if atol > 0 else 1e-12)
    return Mismatch(
        path, "values", float(diff.max()), float(rel.max()), rtol, atol, str(a.dtype).removeprefix("torch.")
    )
