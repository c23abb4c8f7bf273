"""The memory side: AOTAutograd's partition of a joint graph into forward and backward (what capture/graph_memory.py
reads the saved tensors from), sizes of symbolic shapes, which ATen ops are views, and the CUDA caching
allocator's counters (capture/memory.py).

Part of dynascope._torch, the one home of torch's private APIs (see its __init__)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from dynascope._torch.version import moved, unsupported

_listeners: list[Callable[[Any, Any, Any], None]] = []
_lock = threading.Lock()
_original: Any = None


def on_partition(listener: Callable[[Any, Any, Any], None]) -> Callable[[], None]:
    """Call `listener(joint, forward, backward)` with the graph modules of every partition AOTAutograd makes
    from now on (every backend: aot_eager, inductor, dynascope's own); returns the function that stops it.
    A listener that raises is the listener's problem: the partition goes on.

    Private: torch._functorch.partitioners._extract_fwd_bwd_modules(joint_module, ...) -> (fw, bw), which
    both default_partition and min_cut_rematerialization_partition call by its module-global name
    (2.5.1 .. 2.15).
    """
    global _original
    try:
        from torch._functorch import partitioners
    except ImportError as exc:
        raise moved("torch._functorch.partitioners", exc) from exc
    with _lock:
        if _original is None:
            original = getattr(partitioners, "_extract_fwd_bwd_modules", None)
            if original is None:
                raise moved("torch._functorch.partitioners._extract_fwd_bwd_modules")

            def extract(joint_module: Any, *args: Any, **kwargs: Any) -> Any:
                forward, backward = original(joint_module, *args, **kwargs)
                for listen in list(_listeners):
                    try:
                        listen(joint_module, forward, backward)
                    except Exception:  # noqa: BLE001 - never break the user's compile
                        pass
                return forward, backward

            partitioners._extract_fwd_bwd_modules = extract
            _original = original
        _listeners.append(listener)

    def remove() -> None:
        global _original
        with _lock:
            if listener in _listeners:
                _listeners.remove(listener)
            if not _listeners and _original is not None:
                partitioners._extract_fwd_bwd_modules = _original
                _original = None

    return remove


def size_hint(value: Any) -> int | None:
    """An int, or a SymInt's value at the sizes seen at compile time; None where it has none.

    Private: SymInt.node.hint (2.5.1 .. 2.15)."""
    if isinstance(value, int):
        return value
    node = getattr(value, "node", None)
    hint = getattr(node, "hint", None)
    if isinstance(hint, int):
        return hint
    try:
        return int(value)
    except Exception:  # noqa: BLE001 - unbacked, or not a size
        return None


def is_view_op(target: Any) -> bool:
    """Whether an ATen op returns a view of (an alias into) one of its inputs, from its schema, so that it
    allocates nothing. Private: OpOverload._schema (2.5.1 .. 2.15)."""
    schema = getattr(target, "_schema", None)
    if schema is None:
        return False
    returns = schema.returns
    return bool(returns) and all(r.alias_info is not None and not r.alias_info.is_write for r in returns)


_peak_listeners: list[Callable[[bool, int], None]] = []
_peak_originals: dict[str, Any] = {}
_collecting = threading.local()


def on_inductor_peak(listener: Callable[[bool, int], None]) -> Callable[[], None]:
    """Call `listener(is_backward, peak_bytes)` each time inductor schedules a graph with its peak-memory
    pass on (config.reorder_for_peak_memory, the default from 2.6): the peak of the node order it chose, by
    its own estimate (after fusion; it counts the graph's inputs as live until their last use). Returns the
    function that stops it.

    Private: torch._inductor.memory.reorder_for_peak_memory and estimate_peak_memory, which the first calls by
    its module-global name once per order it weighs and keeps the lowest (2.6 .. 2.15); V.graph.is_backward.
    Raises TorchVersionError where torch has no such pass (2.5)."""
    try:
        from torch._inductor import memory as inductor_memory
    except ImportError as exc:  # 2.5: inductor has no peak-memory pass at all
        raise unsupported("inductor's own peak-memory estimate", "2.6") from exc
    with _lock:
        if not _peak_originals:
            reorder = getattr(inductor_memory, "reorder_for_peak_memory", None)
            estimate = getattr(inductor_memory, "estimate_peak_memory", None)
            if reorder is None or estimate is None:
                raise moved("torch._inductor.memory.reorder_for_peak_memory")
            _peak_originals.update(reorder_for_peak_memory=reorder, estimate_peak_memory=estimate)
            inductor_memory.estimate_peak_memory = _counting_estimate(estimate)
            inductor_memory.reorder_for_peak_memory = _reporting_reorder(reorder)
        _peak_listeners.append(listener)

    def remove() -> None:
        with _lock:
            if listener in _peak_listeners:
                _peak_listeners.remove(listener)
            if not _peak_listeners and _peak_originals:
                for name, original in _peak_originals.items():
                    setattr(inductor_memory, name, original)
                _peak_originals.clear()

    return remove


def _counting_estimate(original: Callable[..., Any]) -> Callable[..., Any]:
    def estimate_peak_memory(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        peaks = getattr(_collecting, "peaks", None)
        if peaks is not None and isinstance(result, tuple) and result and isinstance(result[0], int):
            peaks.append(result[0])
        return result

    return estimate_peak_memory


def _reporting_reorder(original: Callable[..., Any]) -> Callable[..., Any]:
    def reorder_for_peak_memory(*args: Any, **kwargs: Any) -> Any:
        outer = getattr(_collecting, "peaks", None)
        _collecting.peaks = []
        try:
            order = original(*args, **kwargs)
            peaks = _collecting.peaks
        finally:
            _collecting.peaks = outer
        if peaks:
            _tell_peak(min(peaks))  # inductor keeps the order of the lowest estimate
        return order

    return reorder_for_peak_memory


def _tell_peak(peak: int) -> None:
    try:
        from torch._inductor.virtualized import V

        is_backward = bool(getattr(V.graph, "is_backward", False))
    except Exception:  # noqa: BLE001 - no graph being lowered: nothing to charge it to
        return
    for listen in list(_peak_listeners):
        try:
            listen(is_backward, peak)
        except Exception:  # noqa: BLE001 - never break the user's compile
            pass
