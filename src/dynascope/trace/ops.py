"""The process-wide table of traced graphs and their ops.

Everything static about an event (its name, category, attribution) is registered here once, at
compile time. The hot path records only a graph id and clock readings; the writer joins them back
to this table. The table outlives trace sessions, so graphs compiled under one session keep
tracing into the next.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np
import orjson

from dynascope.trace.hashing import hash16


@dataclass(frozen=True)
class OpSpec:
    """One traced FX node (kind "op") or one compiled graph (kind "graph")."""

    name: str  # event name, e.g. "function.addmm.default" or "__compiled_fn_1.forward"
    cat: str  # "dynamo" for ops, "dynamo.graph" for graph calls
    grad_enabled: int
    attrs: dict = field(hash=False, compare=False)  # attribution fields (docs/trace-format.md)
    ref: str = ""

    @staticmethod
    def make(name: str, cat: str, grad_enabled: bool, attrs: dict) -> OpSpec:
        ref = hash16(orjson.dumps({"name": name, "cat": cat, **attrs}, option=orjson.OPT_SORT_KEYS).decode())
        return OpSpec(name, cat, int(bool(grad_enabled)), attrs, ref)


class OpTable:
    """specs[i] is an OpSpec; graph g (ids from 1) owns specs graph_spec[g] and op_base[g] .. +n_ops[g]."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.specs: list[OpSpec] = []
        self._graph_spec = [-1]
        self._op_base = [0]
        self._n_ops = [0]
        self._arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.sources: dict[str, str] = {}  # hash -> code a kernel event runs (written once per file, `KS`)

    def register_graph(self, graph: OpSpec, ops: list[OpSpec]) -> int:
        with self._lock:
            gid = len(self._graph_spec)
            self._graph_spec.append(len(self.specs))
            self.specs.append(graph)
            self._op_base.append(len(self.specs))
            self._n_ops.append(len(ops))
            self.specs.extend(ops)
            self._arrays = None
            return gid

    def add_source(self, text: str) -> str:
        """The hash that a kernel's `source` field gives for `text` (its generated code)."""
        key = hash16(text)
        with self._lock:
            self.sources.setdefault(key, text)
        return key

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(graph_spec, op_base, n_ops) indexed by graph id, as int64 arrays for the decoder."""
        arrays = self._arrays
        if arrays is None:
            with self._lock:
                graph_spec, op_base, n_ops = (
                    np.asarray(x, dtype=np.int64) for x in (self._graph_spec, self._op_base, self._n_ops)
                )
                arrays = self._arrays = (graph_spec, op_base, n_ops)
        return arrays

    def graph_specs(self, gid: int) -> list[int]:
        """Indexes of the graph's own spec and its ops' specs."""
        base, n = self._op_base[gid], self._n_ops[gid]
        return [self._graph_spec[gid], *range(base, base + n)]

    def __len__(self) -> int:
        return len(self.specs)


TABLE = OpTable()
