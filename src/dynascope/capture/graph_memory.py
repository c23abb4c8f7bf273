"""What a compiled graph keeps in memory, read from AOTAutograd's partition at compile time (no run-time cost):
the tensors the forward saves for the backward, the forward ops the backward recomputes, and each half's
estimated peak. The rules are in docs/memory.md; the data model in artifacts/memory.py.

    remove = listen(callback)   # callback(GraphMemory) for every partition from now on (the explain observer)
    account = graph_memory(forward, backward, compile_id="0/0")

A traced inductor compile keeps each account beside inductor's cache with its kernels' record
(capture/warm_cache.py), and `restore` hands it to the listeners when AOTAutograd's cache serves the graph
without partitioning it again.
"""

from __future__ import annotations

import contextlib
import operator
import os
import re
import threading
from collections.abc import Callable, Iterable
from typing import Any

from dynascope import _torch
from dynascope.artifacts.memory import GraphMemory, LiveTensor, PeakEstimate, RecomputedOp, SavedTensor
from dynascope.capture.attribution import module_of, param_path, plain_graph_name, target_text, user_line
from dynascope.errors import TorchVersionError

TANGENT_PREFIX = "tangents"
_listeners: list[Callable[[GraphMemory], None]] = []
_unhook: list[Callable[[], None]] = []
_lock = threading.Lock()  # compiles may run on several threads
# the latest account of each (compile id, graph), for inductor's estimate that comes after the partition
# (the backward's maybe much later, at its first call); bounded, oldest dropped
_recent: dict[tuple[str | None, str | None], GraphMemory] = {}
_RECENT_MAX = 256


def listen(listener: Callable[[GraphMemory], None]) -> Callable[[], None]:
    """Call `listener(account)` for every forward/backward partition AOTAutograd makes from now on, and for
    every account restored from beside inductor's cache; returns the function that stops it. Raises
    TorchVersionError where this torch's partitioner cannot be watched."""
    with _lock:
        if not _unhook:
            _unhook.append(_torch.on_partition(_on_partition))
            with contextlib.suppress(TorchVersionError):  # torch 2.5 has no peak-memory pass to read
                _unhook.append(_torch.on_inductor_peak(_on_inductor_peak))
        _listeners.append(listener)

    def remove() -> None:
        with _lock:
            if listener in _listeners:
                _listeners.remove(listener)
            while not _listeners and _unhook:
                _unhook.pop()()

    return remove


def _on_partition(joint: Any, forward: Any, backward: Any) -> None:
    account = graph_memory(forward, backward, _torch.current_compile_id(), _graph_name())
    _tell(account)


def _graph_name() -> str | None:
    """Dynamo's name of the graph being compiled, as the trace names it: a piece DDPOptimizer split at DDP's
    buckets is "__compiled_fn_1[ddp 2/4]" (capture/backend.py)."""
    name = plain_graph_name(_torch.compiling_graph_name())
    try:
        split = _torch.ddp_split()
    except TorchVersionError:
        split = None
    if name and split is not None and split.get("index") is not None:
        return f"{name}[ddp {int(split['index']) + 1}/{int(split['count'])}]"
    return name


def restore(record: dict, compile_id: str | None, graph: str | None) -> None:
    """An account saved beside inductor's cache (GraphMemory.to_dict()), for the compile that loaded it."""
    account = GraphMemory.from_dict(record)
    account.compile_id, account.graph = compile_id, graph
    _tell(account)


def restore_backward_estimate(record: dict, compile_id: str | None, graph: str | None) -> None:
    """Inductor's estimate of the backward's peak, kept with the backward's record beside inductor's cache, onto
    the account `restore` handed out from the forward's record for the same compile."""
    saved = GraphMemory.from_dict(record).backward_peak
    with _lock:
        account = _recent.get((compile_id, graph))
    if saved is not None and account is not None and account.backward_peak is not None:
        account.backward_peak.inductor_bytes = saved.inductor_bytes


def _on_inductor_peak(is_backward: bool, peak: int) -> None:
    """Inductor's own estimate of a half's peak, beside ours on the account of the graph being compiled."""
    compile_id = _torch.current_compile_id()
    with _lock:
        account = _recent.get((compile_id, _graph_name()))
        if account is None:  # a backward compiled at its first call, outside Dynamo's graph compile
            account = next((a for a in reversed(_recent.values()) if a.compile_id == compile_id
                            and _half(a, is_backward) is not None
                            and _half(a, is_backward).inductor_bytes is None), None)  # type: ignore[union-attr]
    half = _half(account, is_backward) if account is not None else None
    if half is not None:
        half.inductor_bytes = max(half.inductor_bytes or 0, peak)  # a graph with subgraphs schedules several


def _half(account: GraphMemory, is_backward: bool) -> PeakEstimate | None:
    return account.backward_peak if is_backward else account.forward_peak


def _tell(account: GraphMemory) -> None:
    with _lock:
        _recent.pop((account.compile_id, account.graph), None)
        _recent[(account.compile_id, account.graph)] = account
        while len(_recent) > _RECENT_MAX:
            del _recent[next(iter(_recent))]
    for listener in list(_listeners):
        try:
            listener(account)
        except Exception:  # noqa: BLE001 - a listener's failure is its own; the compile goes on
            pass


def graph_memory(forward: Any, backward: Any, compile_id: str | None, graph: str | None = None) -> GraphMemory:
    """The memory account of one partition: `forward` and `backward`, the two graph modules AOTAutograd's
    partitioner cut from a joint graph (they share node names)."""
    sizes = _Sizes()
    fw_nodes = {node.name: node for node in forward.graph.nodes}
    saved = _saved(backward, fw_nodes, sizes)
    counted = {s.name for s in saved if s.kind == "activation"} | _tangents(backward)
    return GraphMemory(
        compile_id=compile_id,
        graph=graph,
        saved=saved,
        recomputed=_recomputed(fw_nodes, backward),
        forward_peak=peak_estimate(forward, counted_inputs=set(), sizes=sizes),
        backward_peak=peak_estimate(backward, counted_inputs=counted, sizes=sizes),
        symbolic=sizes.symbolic,
    )


def name_inputs(memory: GraphMemory, input_names: list[str]) -> None:
    """Name the graph inputs a graph saves ("primals_3" -> "x", "fc2.weight") from Dynamo's graph inputs,
    in order (AOTAutograd's primals are Dynamo's placeholders, flattened)."""
    for tensor in memory.saved:
        if tensor.kind != "input" or not tensor.op.startswith("primals_"):
            continue
        index = int(tensor.op.removeprefix("primals_")) - 1
        if 0 <= index < len(input_names):
            tensor.op = _input_label(input_names[index])


def _input_label(name: str) -> str:
    """Dynamo's placeholder name as the user wrote it: "L_x_" -> "x", a parameter -> "fc2.weight"."""
    path = param_path(name)
    return re.sub(r"^[LG]_", "", path).strip("_") or name


# -- saved tensors --------------------------------------------------------------------------------


def _saved(backward: Any, fw_nodes: dict[str, Any], sizes: _Sizes) -> list[SavedTensor]:
    out: list[SavedTensor] = []
    bases: set[str] = set()
    for placeholder in backward.graph.nodes:
        if placeholder.op != "placeholder" or placeholder.name.startswith(TANGENT_PREFIX):
            continue
        value = placeholder.meta.get("val")
        if not _is_tensor(value):
            continue  # a saved size (SymInt), a seed, backward state
        source = fw_nodes.get(placeholder.name, placeholder)
        base = storage_owner(source)
        is_input = base.op == "placeholder"
        nbytes, expr = sizes.storage_bytes(base) if base.name not in bases else (0, None)
        bases.add(base.name)
        layer, module_type = module_of(base)
        file, line, code = user_line(base)
        out.append(SavedTensor(
            name=placeholder.name,
            kind="input" if is_input else "activation",
            shape=sizes.shape_text(value),
            dtype=str(value.dtype).removeprefix("torch."),
            bytes=nbytes,
            op=base.name if is_input else target_text(base),
            layer=layer,
            module_type=module_type,
            file=_base(file),
            line=line,
            code=code,
            bytes_expr=expr,
        ))  # fmt: skip
    return out


def _tangents(backward: Any) -> set[str]:
    return {n.name for n in backward.graph.nodes if n.op == "placeholder" and n.name.startswith(TANGENT_PREFIX)}


def storage_owner(node: Any) -> Any:
    """The node whose output owns the storage `node`'s output lives in: itself, or what it is a view of."""
    seen = 0
    while node.op == "call_function" and _is_alias(node) and node.args and seen < 10_000:
        first = node.args[0]
        if not hasattr(first, "op"):
            break
        node, seen = first, seen + 1
    return node


def _is_alias(node: Any) -> bool:
    return node.target is operator.getitem or _torch.is_view_op(node.target)


# -- recomputation ----------------------------------------------------------------------------------


def _recomputed(fw_nodes: dict[str, Any], backward: Any) -> list[RecomputedOp]:
    """Backward nodes that the forward computes too (the partitioner copies a node it recomputes under the
    same name), views left out: they allocate nothing."""
    out = []
    for node in backward.graph.nodes:
        twin = fw_nodes.get(node.name)
        if node.op != "call_function" or twin is None or twin.op != "call_function" or _is_alias(node):
            continue
        layer, _ = module_of(twin)
        file, line, code = user_line(twin)
        out.append(RecomputedOp(node.name, target_text(node), layer, _base(file), line, code))
    return out


# -- peak estimate -----------------------------------------------------------------------------------


def peak_estimate(gm: Any, counted_inputs: set[str], sizes: _Sizes | None = None) -> PeakEstimate:
    """The most bytes live at once while `gm` runs its nodes in order (docs/memory.md): each node's output is
    allocated when it runs (views and getitem allocate nothing and keep their base alive) and freed after
    its storage's last use; what the graph returns stays. Inputs count only where named in
    `counted_inputs` (the backward's saved activations and incoming gradients: the boxed calling convention
    frees them after their last use); parameters and the caller's inputs are held by their owners."""
    sizes = sizes or _Sizes()
    nodes = list(gm.graph.nodes)
    owner = {node: storage_owner(node) for node in nodes}
    end: dict[Any, int] = {}
    for index, node in enumerate(nodes):
        for arg in node.all_input_nodes:
            base = owner[arg]
            end[base] = max(end.get(base, -1), index)
        if node.op == "output":
            for arg in node.all_input_nodes:
                end[owner[arg]] = len(nodes)  # returned: lives on
    frees: dict[int, list[Any]] = {}
    for base, index in end.items():
        frees.setdefault(index, []).append(base)
    live: dict[Any, int] = {}  # storage owner -> bytes
    total = 0
    best = PeakEstimate(bytes=0)
    for index, node in enumerate(nodes):
        allocates = (node.op == "placeholder" and node.name in counted_inputs) or (
            node.op == "call_function" and owner[node] is node)
        if allocates:
            live[node] = sizes.node_bytes(node)
            total += live[node]
            if total > best.bytes:
                largest = max(live, key=live.__getitem__)
                best = PeakEstimate(total, _tensor_at(node, live[node]), _tensor_at(largest, live[largest]))
        for base in frees.get(index, ()):
            total -= live.pop(base, 0)
    return best


def _tensor_at(node: Any, nbytes: int) -> LiveTensor:
    layer, _ = module_of(node)
    file, line, _code = user_line(node)
    op = target_text(node) if node.op == "call_function" else node.name
    return LiveTensor(node=node.name, bytes=nbytes, op=op, layer=layer, file=_base(file), line=line)


def _base(file: str) -> str:
    return os.path.basename(file) if file else ""


# -- sizes --------------------------------------------------------------------------------------------


def _is_tensor(value: Any) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and hasattr(value, "element_size")


def _tensors(value: Any) -> Iterable[Any]:
    if _is_tensor(value):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


class _Sizes:
    """Bytes of nodes' outputs at the sizes seen at compile time, remembering whether any was symbolic."""

    def __init__(self) -> None:
        self.symbolic = False
        self._cache: dict[Any, tuple[int, str | None]] = {}

    def node_bytes(self, node: Any) -> int:
        return self.storage_bytes(node)[0]

    def storage_bytes(self, node: Any) -> tuple[int, str | None]:
        """(bytes, the symbolic expression or None) of every tensor the node outputs."""
        cached = self._cache.get(node)
        if cached is None:
            total, parts, symbolic = 0, [], False
            for tensor in _tensors(node.meta.get("val")):
                nbytes, expr = self._tensor_bytes(tensor)
                total += nbytes
                parts.append(expr or str(nbytes))
                symbolic = symbolic or expr is not None
            expr_text = " + ".join(parts) if symbolic else None
            cached = self._cache[node] = (total, expr_text)
        return cached

    def _tensor_bytes(self, tensor: Any) -> tuple[int, str | None]:
        numel = tensor.numel()
        itemsize = tensor.element_size()
        if isinstance(numel, int):
            return numel * itemsize, None
        self.symbolic = True
        hint = _torch.size_hint(numel)
        return (0 if hint is None else hint * itemsize), f"{itemsize}*{numel}"

    def shape_text(self, value: Any) -> str:
        dims = []
        for dim in value.shape:
            if isinstance(dim, int):
                dims.append(str(dim))
            else:
                self.symbolic = True
                hint = _torch.size_hint(dim)
                dims.append(f"{dim}={hint}" if hint is not None else str(dim))
        return "[" + ", ".join(dims) + "]"
