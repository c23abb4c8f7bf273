"""The only module that touches torch's private APIs.

Each accessor names the private piece it reads and the torch versions it was checked on. When a piece
moved, the accessor raises TorchVersionError naming it and the installed torch version, so callers
can report that one line and carry on with the rest of their work.

Public torch APIs (torch.compile, torch.fx.GraphModule, ...) are used directly elsewhere; anything
with a leading underscore, or documented as internal, goes through here.
"""

from __future__ import annotations

import importlib
from typing import Any

from .errors import TorchVersionError

MIN_TORCH = (2, 5, 1)
CHECKED_ON = "2.13.0"  # every accessor below was exercised against this release


def _parse_version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("+")[0].split(".")[:3]:
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


def moved(piece: str, exc: BaseException | None = None) -> TorchVersionError:
    """The error for a private torch piece that is not where dynascope expects it."""
    detail = f" ({type(exc).__name__}: {exc})" if exc else ""
    return TorchVersionError(
        f"torch {torch_version()} has no {piece}{detail}; dynascope was checked on torch {CHECKED_ON}. "
        "That part of the report is skipped; please report this torch version."
    )


# ---------------------------------------------------------------------------------------------
# Capture side (compile ids, AOT autograd, FX codegen). Checked on 2.13.0.
# ---------------------------------------------------------------------------------------------


def current_compile_id() -> str | None:
    """The compile id Dynamo is working on now, printed as Dynamo prints it ("0/0"), or None.

    Private: torch._guards.CompileContext.current_compile_id (2.1 .. 2.13).
    """
    try:
        from torch._guards import CompileContext
    except ImportError as exc:
        raise moved("torch._guards.CompileContext", exc) from exc
    cid = CompileContext.current_compile_id()
    return None if cid is None else str(cid)


def aot_autograd(**kwargs: Any) -> Any:
    """torch._dynamo.backends.common.aot_autograd (2.0 .. 2.13)."""
    try:
        from torch._dynamo.backends.common import aot_autograd as _aot
    except ImportError as exc:
        raise moved("torch._dynamo.backends.common.aot_autograd", exc) from exc
    return _aot(**kwargs)


def min_cut_partitioner() -> Any:
    """The partitioner backend "aot_eager" uses: torch._functorch.partitioners (2.0 .. 2.13)."""
    try:
        from torch._functorch.partitioners import min_cut_rematerialization_partition
    except ImportError as exc:
        raise moved("torch._functorch.partitioners.min_cut_rematerialization_partition", exc) from exc
    return min_cut_rematerialization_partition


def boxed_codegen_class() -> type:
    """torch.fx.graph._BoxedCodeGen: the list-in calling convention AOT compilers use (2.1 .. 2.13)."""
    try:
        from torch.fx.graph import _BoxedCodeGen
    except ImportError as exc:
        raise moved("torch.fx.graph._BoxedCodeGen", exc) from exc
    return _BoxedCodeGen


def lookup_backend(name: str) -> Any:
    """Resolve a backend name ("eager", "aot_eager", "inductor") to its compiler function."""
    try:
        from torch._dynamo.backends.registry import lookup_backend as _lookup
    except ImportError as exc:
        raise moved("torch._dynamo.backends.registry.lookup_backend", exc) from exc
    return _lookup(name)


def add_structured_trace_handler(callback: Any) -> Any:
    """Receive torch's structured compile log (what TORCH_TRACE/tlparse see) in-process, no file needed.

    `callback(record: dict, payload: str | None)` is called for every record; `record` is torch's
    metadata dict (its first key names the record: "dynamo_start", "chromium_event",
    "compilation_metrics", ...; plus frame_id / frame_compile_id / attempt). Returns a function that
    removes the handler. Several handlers may be installed at once (the logger fans out).

    Private: the "torch.__trace" logger that torch._logging.trace_structured writes to, which emits
    only while it has a handler (2.2 .. 2.13).
    """
    import logging

    require_torch()
    logger = logging.getLogger("torch.__trace")

    class _Handler(logging.Handler):
        def emit(self, rec: logging.LogRecord) -> None:
            metadata = getattr(rec, "metadata", None)
            if isinstance(metadata, dict):
                try:
                    callback(metadata, getattr(rec, "payload", None))
                except Exception:  # an observer must never break the user's compile
                    pass

    handler = _Handler(level=logging.DEBUG)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)

    def remove() -> None:
        logger.removeHandler(handler)

    return remove


# ---------------------------------------------------------------------------------------------
# Explain side (cache entries, guards, hooks). Owned by the explain package; add accessors below.
# ---------------------------------------------------------------------------------------------
