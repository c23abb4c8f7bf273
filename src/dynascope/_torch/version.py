"""torch itself: whether it is there, its version, and the one-line errors for a piece that moved.

Part of dynascope._torch, the one home of torch's private APIs (see its __init__)."""

from __future__ import annotations

import importlib
from typing import Any

from dynascope.errors import TorchVersionError

MIN_TORCH = (2, 5, 1)
CHECKED_ON = "2.5.1, 2.13.0 and 2.15.0"  # every accessor below was exercised against these releases


def _parse_version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("+", maxsplit=1)[0].split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def require_torch() -> Any:
    """Import torch, or raise one clear line saying how to install a usable version."""
    try:
        torch = importlib.import_module("torch")
    except ImportError as exc:
        raise TorchVersionError(
            "dynascope needs PyTorch >= 2.5.1, and torch is not installed: "
            "pip install torch==2.13.0 (the CPU build) or a newer release"
        ) from exc
    if _parse_version(torch.__version__) < MIN_TORCH:
        raise TorchVersionError(
            f"dynascope needs PyTorch >= 2.5.1, found {torch.__version__}: upgrade with pip install -U 'torch>=2.5.1'"
        )
    return torch


def torch_version() -> str:
    return require_torch().__version__


def torch_at_least(*version: int) -> bool:
    """Whether the installed torch is this release or newer: torch_at_least(2, 6)."""
    return _parse_version(torch_version()) >= version


def moved(piece: str, exc: BaseException | None = None) -> TorchVersionError:
    """The error for a private torch piece that is not where dynascope expects it."""
    detail = f" ({type(exc).__name__}: {exc})" if exc else ""
    return TorchVersionError(
        f"torch {torch_version()} has no {piece}{detail}; dynascope was checked on torch {CHECKED_ON}. "
        "That part is skipped; please report this torch version."
    )


def unsupported(feature: str, has_it: str = "2.13.0") -> TorchVersionError:
    """The one line for a feature the installed torch cannot give at all (not moved: never there)."""
    return TorchVersionError(
        f"{feature}: not available on torch {torch_version()} (torch {has_it} has them); everything else works"
    )
