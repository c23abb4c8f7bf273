"""What a traced inductor compile keeps beside inductor's cache, so that AOTAutograd's cache can serve it.

A hit of AOTAutograd's cache hands back inductor's compiled graphs without the graphs they were made
from, so the kernels' attribution (fused ops, layers, source lines) cannot be worked out again. A traced
compile that did work it out writes it down, one small JSON file per compiled graph,
`<inductor cache dir>/dynascope/<FX-graph key>.<phase>.<graph digest>.kernels.json`; a hit is taken only
where every graph it loads has such a record for this very Dynamo graph (the digest covers its code,
module paths and source lines, so an edit above the compiled function, or the same graph compiled for
another layer, is a miss). Otherwise torch counts a miss and the graphs compile as before.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from dynascope import _torch
from dynascope.capture.attribution import module_of
from dynascope.capture.kernels import read_json, write_json

# 2: kernels of functional collectives carry comm_* fields; 3: a forward's record carries the graph's memory
# account (capture/graph_memory.py), which a hit hands to the explain observer
VERSION = 3


def graph_digest(gm: Any) -> str:
    """A digest of a Dynamo graph with what its kernels' attribution is made of: its code, and each node's
    module path and type and its stack trace (the user's file, line and code)."""
    digest = hashlib.sha256(f"dynascope-kernels-{VERSION}\n{gm.code}".encode())
    for node in gm.graph.nodes:
        layer, module_type = module_of(node)
        stack = node.meta.get("stack_trace") or ""
        digest.update(f"\0{node.op}\0{node.name}\0{layer}\0{module_type}\0{stack}".encode())
    return digest.hexdigest()[:24]


def _path(key: str | None, phase: str, digest: str) -> str | None:
    if not key or not key.isalnum():
        return None
    where = _torch.inductor_cache_dir()
    return os.path.join(where, "dynascope", f"{key}.{phase}.{digest}.kernels.json") if where else None


def load(key: str | None, phase: str, digest: str) -> dict | None:
    """The record of one compiled graph (kind "kernels": names, fields; kind "replay": fields), or None."""
    path = _path(key, phase, digest)
    if path is None:
        return None
    record = read_json(path)
    if not isinstance(record, dict) or record.get("version") != VERSION:
        return None
    if record.get("kind") not in ("kernels", "replay") or len(record.get("names", ())) != len(record.get("fields", ())):
        return None
    return record


def have(keys: dict[str, str | None], digest: str) -> bool:
    """Whether every graph of a cache hit ({phase: FX-graph key}) has its record."""
    return bool(keys) and all(load(key, phase, digest) is not None for phase, key in keys.items())


def save(key: str | None, phase: str, digest: str, kind: str, named: list[tuple[str, dict]],
         memory: dict | None = None) -> None:  # fmt: skip
    """Write one compiled graph's record (kernel names and their attribution fields, and for a forward the
    graph's memory account), atomically; a read-only cache directory only means that warm runs compile again."""
    path = _path(key, phase, digest)
    if path is None or os.path.exists(path):
        return
    record = {"version": VERSION, "kind": kind, "names": [name for name, _ in named],
              "fields": [fields for _, fields in named]}  # fmt: skip
    if memory is not None:
        record["memory"] = memory
    write_json(path, record)
