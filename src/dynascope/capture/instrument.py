"""Rewrite an FX graph's generated Python so that it records a clock reading after every op.

The generated forward gains one prologue line and one line per traced node:

    _dsc_r = _dsc_sink(); _dsc_c = _dsc_clock; _dsc_r(-7); _dsc_r(_dsc_c())
    addmm = torch.ops.aten.addmm.default(primals_2, primals_1, t);  t = None
    _dsc_r(_dsc_c())
    ...

That is one C clock call and one list append per op, with locals only: no interpreter, no dicts,
no formatting. The writer reconstructs the events from the readings (see trace/decode.py).
"""

from __future__ import annotations

from typing import Any

from dynascope.capture.attribution import TRACED_OPS
from dynascope.trace import buffers

_COUNTER = "# COUNTER: "


def traced_nodes(gm: Any) -> list[Any]:
    return [node for node in gm.graph.nodes if node.op in TRACED_OPS]


def uses_cuda(gm: Any) -> bool:
    """Whether any graph input is a CUDA tensor (from compile-time metadata)."""
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            device = getattr(node.meta.get("val", node.meta.get("example_value")), "device", None)
            if getattr(device, "type", None) == "cuda":
                return True
    return False


def instrument(gm: Any, gid: int, synchronize: Any = None, sink: Any = buffers.sink) -> None:
    """Regenerate `gm.forward` with clock readings for graph id `gid` (in place); `sink` gives each call
    its thread's list (capture/device.py gives graphs on CUDA its own).

    With `synchronize` (e.g. torch.cuda.synchronize), it is called before every reading, so that an
    op's time is its execution on the device rather than its launch.
    """
    nodes = list(gm.graph.nodes)
    traced = {index for index, node in enumerate(nodes) if node.op in TRACED_OPS}
    reading = "_dsc_sync(); _dsc_r(_dsc_c())\n" if synchronize else "_dsc_r(_dsc_c())\n"

    def add_readings(body: list[str]) -> list[str]:
        out = [f"_dsc_r = _dsc_sink(); _dsc_c = _dsc_clock; _dsc_r({-gid}); {reading}"]
        current = None
        for piece in body:
            if piece.startswith(_COUNTER):
                if current in traced:
                    out.append(reading)
                current = int(piece[len(_COUNTER) :])
            out.append(piece)
        if current in traced:  # a graph whose last node is an op (no output node seen after it)
            out.append(reading)
        return out

    restore = gm.graph.on_generate_code(lambda previous: _chain(previous, add_readings))
    try:
        _recompile(gm)
    except BaseException:
        with restore:  # leaves the graph's code as it was, so that it can still run untraced
            pass
        _recompile(gm)
        raise
    namespace = gm.forward.__globals__
    namespace["_dsc_sink"] = sink
    namespace["_dsc_clock"] = buffers.now_ns
    if synchronize:
        namespace["_dsc_sync"] = synchronize


def _recompile(gm: Any) -> None:
    gm.recompile()
    real_recompile = getattr(gm, "real_recompile", None)  # lazy graph modules compile on first call
    if real_recompile is not None:
        real_recompile()


def _chain(previous, transform):
    if previous is None:
        return transform
    return lambda body: transform(previous(body))
