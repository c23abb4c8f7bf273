"""What a compiled graph keeps in memory, as plain data: the part of explanation.json that says, for each
graph AOTAutograd split into a forward and a backward, which tensors the forward saves for the backward,
which forward ops the partitioner recomputes in the backward instead of saving them, and the peak live
memory each half reaches by the estimate of docs/memory.md.

Built on the torch side by capture/graph_memory.py from the partitioner's graphs; read here without torch.
Sizes are bytes at the sizes seen at compile time; where a shape is symbolic (dynamic shapes) the
expression is kept beside the figure ("4*s0*32").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from dynascope.artifacts import _data


@dataclass
class SavedTensor(_data.Data):
    """One tensor the forward hands to the backward."""

    name: str  # the forward node's name ("relu", "addmm_1", "primals_3")
    kind: str  # "activation" (the forward computed it) or "input" (a graph input kept: a parameter, the batch)
    shape: str  # "[4, 32]", symbolic where the shape is ("[s0, 32]")
    dtype: str
    bytes: int  # the storage it keeps alive, at the sizes seen
    op: str = ""  # the forward op that produced it ("aten.relu.default"); for an input, the input's name
    layer: str = ""
    module_type: str = ""
    file: str = ""
    line: int = 0
    code: str = ""
    bytes_expr: str | None = None  # where the size is symbolic: the expression bytes evaluates


@dataclass
class RecomputedOp(_data.Data):
    """A forward op the partitioner placed in the backward too: it runs again there instead of its
    output being saved (views, which allocate nothing, are left out)."""

    name: str
    op: str
    layer: str = ""
    file: str = ""
    line: int = 0
    code: str = ""


@dataclass
class LiveTensor(_data.Data):
    """A node's output, where it was made."""

    node: str
    bytes: int
    op: str = ""
    layer: str = ""
    file: str = ""
    line: int = 0


@dataclass
class PeakEstimate(_data.Data):
    """The most memory one graph holds at once while it runs, by the liveness rule of docs/memory.md: the
    node whose output reached it, and the biggest tensor live then (often what to look at). Beside it,
    inductor's own estimate for the same half where inductor compiled it with its peak-memory pass: after
    fusion, the graph's inputs counted until their last use."""

    bytes: int
    at: LiveTensor | None = None
    largest: LiveTensor | None = None
    inductor_bytes: int | None = None
    _nested: ClassVar[dict[str, type]] = {"at": LiveTensor, "largest": LiveTensor}


@dataclass
class LayerSaved(_data.Data):
    layer: str  # "" for activations no module produced
    bytes: int
    tensors: int


@dataclass
class GraphMemory(_data.Data):
    """One forward/backward pair of a compiled graph (one per compile, one per piece DDP split)."""

    compile_id: str | None
    graph: str | None = None  # Dynamo's graph name where known ("__compiled_fn_1")
    part: int = 1  # the how-many-th partition of this compile (DDP pieces, nested graphs)
    saved: list[SavedTensor] = field(default_factory=list)
    recomputed: list[RecomputedOp] = field(default_factory=list)
    forward_peak: PeakEstimate | None = None
    backward_peak: PeakEstimate | None = None
    symbolic: bool = False  # some size is symbolic: figures are at the sizes seen at compile time
    _nested: ClassVar[dict[str, type]] = {
        "saved": SavedTensor, "recomputed": RecomputedOp, "forward_peak": PeakEstimate,
        "backward_peak": PeakEstimate,
    }

    @property
    def saved_bytes(self) -> int:
        """Bytes of activations kept for the backward (graph inputs kept are held by their owners anyway)."""
        return sum(s.bytes for s in self.saved if s.kind == "activation")

    def by_layer(self) -> list[LayerSaved]:
        """Saved activations per layer, largest first."""
        totals: dict[str, list[int]] = {}
        for s in self.saved:
            if s.kind == "activation":
                row = totals.setdefault(s.layer, [0, 0])
                row[0] += s.bytes
                row[1] += 1
        return sorted((LayerSaved(layer, b, n) for layer, (b, n) in totals.items()), key=lambda r: -r.bytes)


def human_bytes(value: float) -> str:
    """Bytes for people: 512 B, 4.1 kB, 12.3 MB, 1.5 GB (powers of 1000)."""
    v = float(value)
    for unit in ("B", "kB", "MB", "GB"):
        if abs(v) < 1000:
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.3g} {unit}"
        v /= 1000
    return f"{v:,.3g} TB"


def saved_by_layer(graphs: list[GraphMemory]) -> list[LayerSaved]:
    """Saved activations per layer over several graphs, largest first."""
    totals: dict[str, list[int]] = {}
    for graph in graphs:
        for row in graph.by_layer():
            acc = totals.setdefault(row.layer, [0, 0])
            acc[0] += row.bytes
            acc[1] += row.tensors
    return sorted((LayerSaved(layer, b, n) for layer, (b, n) in totals.items()), key=lambda r: -r.bytes)

