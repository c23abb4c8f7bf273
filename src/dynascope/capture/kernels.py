"""Kernel-level tracing under inductor: a clock reading after every call in the generated wrapper.

Inductor turns each graph into a Python wrapper module whose `call(args)` allocates buffers and calls,
in order, the generated kernels (`cpp_fused_relu_0(buf1)`, `triton_poi_fused_relu_0.run(...)`),
extern kernels (`extern_kernels.addmm(...)`) and fallback ops (`torch.ops.aten.xxx.default(...)`).
`instrumented_call` compiles a copy of that function with the hot path of op events:

    def call(args):
        _dsc_r = _dsc_sink(); _dsc_c = _dsc_clock; _dsc_r(-7); _dsc_r(_dsc_c())
        ...
        extern_kernels.addmm(primals_2, primals_3, ..., out=buf0)
        _dsc_r(_dsc_c())
        cpp_fused_relu_0(buf1)
        _dsc_r(_dsc_c())

The copy runs in the wrapper module's namespace (the same kernel objects); the module itself and
inductor's caches are untouched. Only statements that always run are timed: those of `call`'s body
and of `with` blocks in it (device guards), never inside `if`/loops, so that readings and kernels
stay in step. A kernel event covers the wrapper's lines since the previous kernel (its output
allocations and views) and the kernel itself.
"""

from __future__ import annotations

import ast
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dynascope.capture.attribution import comm_fields_of, module_of, stack_line, target_text, user_line
from dynascope.trace import fileio

_FALLBACK_ROOTS = ("torch.ops.", "aten.", "inductor_ops.", "_quantized.")
_LINE_NUMBER = re.compile(r", line \d+,")
_TEMPLATE = "def _dsc_factory(_dsc_sink, _dsc_clock, _dsc_sync):\n    pass\n"


@dataclass(frozen=True)
class KernelCall:
    """One timed statement of the wrapper: the kernel it calls and what kind of kernel that is."""

    name: str  # "cpp_fused_relu_0", "extern_kernels.addmm", "aten.convolution_backward.default"
    kind: str  # "generated", "extern" or "fallback"


@dataclass
class Wrapper:
    """The parts of one wrapper module's source that instrumenting it needs."""

    function: ast.FunctionDef  # its `call`
    timed: list[tuple[ast.stmt, KernelCall]]  # the statements of `call` that run a kernel, in order
    codes: list[str]  # what each timed statement runs: a generated kernel's source, else the statement
    consumers: list[int | None]  # per timed statement: the first later one that uses a buffer it made

    @staticmethod
    def parse(source: str) -> Wrapper:
        tree = ast.parse(source)
        function = find_call(tree)
        generated = generated_kernels(tree)
        timed = _timed(function.body, set(generated))
        codes = [generated.get(kernel.name) or ast.unparse(statement) for statement, kernel in timed]
        return Wrapper(function, timed, codes, _consumers(function.body, timed))

    @property
    def calls(self) -> list[KernelCall]:
        """The kernels `call` runs, in order."""
        return [kernel for _, kernel in self.timed]


def find_call(tree: ast.Module) -> ast.FunctionDef:
    """The wrapper's `call`: a module function (torch 2.5.1) or the method of its Runner class (2.13+)."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "call":
            return node
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "call":
                    return item
    raise ValueError("inductor's wrapper code has no call function")


def generated_kernels(tree: ast.Module) -> dict[str, str]:
    """The kernels the wrapper compiles (`name = async_compile.<kind>(..., source, ...)`): name -> source,
    the longest string literal of the call (the C++ or Triton code)."""
    kernels: dict[str, str] = {}
    for node in tree.body:
        if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Call):
            continue
        if _dotted(node.value.func).startswith("async_compile."):
            arguments = [*node.value.args, *(k.value for k in node.value.keywords)]
            texts = [a.value for a in arguments if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            code = max(texts, key=len, default="").strip("\n")
            kernels.update((t.id, code) for t in node.targets if isinstance(t, ast.Name))
    return kernels


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    parts.append(node.id)
    return ".".join(reversed(parts))


def kernel_of(statement: ast.stmt, generated: set[str]) -> KernelCall | None:
    """The kernel a statement calls, or None for allocations, views, asserts and the rest."""
    value = statement.value if isinstance(statement, (ast.Expr, ast.Assign)) else None
    if not isinstance(value, ast.Call):
        return None
    dotted = _dotted(value.func)
    root = dotted.split(".", 1)[0]
    if root in generated:
        return KernelCall(root, "generated")
    if dotted.startswith("extern_kernels."):
        return KernelCall(dotted, "extern")
    if dotted.startswith(_FALLBACK_ROOTS) and "._alloc_from_pool" not in dotted:
        return KernelCall(dotted.removeprefix("torch.ops."), "fallback")
    return None


def _timed(body: list[ast.stmt], generated: set[str]) -> list[tuple[ast.stmt, KernelCall]]:
    found = []
    for statement in body:
        if isinstance(statement, ast.With):
            found.extend(_timed(statement.body, generated))
            continue
        kernel = kernel_of(statement, generated)
        if kernel is not None:
            found.append((statement, kernel))
    return found


def _flat(body: list[ast.stmt]) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for statement in body:
        out.extend(_flat(statement.body) if isinstance(statement, ast.With) else [statement])
    return out


def _written(statement: ast.stmt, kernel: KernelCall) -> set[str]:
    """Buffers a kernel call writes that it was passed: `out=`, or the first argument of an in-place
    fallback op (`aten.scatter_reduce_.two(buf7, ...)`)."""
    call = statement.value if isinstance(statement, (ast.Expr, ast.Assign)) else None
    if not isinstance(call, ast.Call):
        return set()
    out = {k.value.id for k in call.keywords if k.arg == "out" and isinstance(k.value, ast.Name)}
    parts = kernel.name.split(".")
    in_place = kernel.kind == "fallback" and len(parts) == 3 and parts[1].endswith("_")
    if in_place and call.args and isinstance(call.args[0], ast.Name):
        out.add(call.args[0].id)
    return out


def _consumers(body: list[ast.stmt], timed: list[tuple[ast.stmt, KernelCall]]) -> list[int | None]:
    """For each timed statement, the index of the first later one that reads a buffer made for it: one
    assigned since the previous timed statement (its output allocations), passed as its `out=`, or
    written in place."""
    position = {id(statement): k for k, (statement, _) in enumerate(timed)}
    made: list[set[str]] = []
    fresh: set[str] = set()
    for statement in _flat(body):
        if isinstance(statement, ast.Assign):
            fresh.update(t.id for t in statement.targets if isinstance(t, ast.Name) and t.id.startswith("buf"))
        if id(statement) in position:
            made.append(fresh | _written(statement, timed[position[id(statement)]][1]))
            fresh = set()
    used = [{n.id for n in ast.walk(statement) if isinstance(n, ast.Name)} for statement, _ in timed]
    return [next((j for j in range(k + 1, len(timed)) if made[k] & used[j]), None) for k in range(len(timed))]


def _add_readings(body: list[ast.stmt], timed: set[int], reading: str) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for statement in body:
        if isinstance(statement, ast.With):
            statement.body = _add_readings(statement.body, timed, reading)
        out.append(statement)
        if id(statement) in timed:
            out.extend(_statements(reading, statement))
    return out


def _statements(text: str, at: ast.AST) -> list[ast.stmt]:
    statements = ast.parse(text).body
    for statement in statements:
        for node in ast.walk(statement):
            ast.copy_location(node, at)
    return statements


def instrumented_call(wrapper: Wrapper, filename: str, namespace: dict, gid: int, sink: Callable,
                      clock: Callable, synchronize: Callable | None = None) -> Callable:  # fmt: skip
    """A copy of the wrapper's `call` that records graph `gid`'s header and a reading after each kernel.

    Compiled from the wrapper's own source and run in its module namespace (`namespace`), so it calls
    the same kernel objects; `filename` keeps tracebacks pointing at the wrapper file. Use once per
    parse: it rewrites `wrapper.function`.
    """
    function = wrapper.function
    reading = "_dsc_sync(); _dsc_r(_dsc_c())" if synchronize else "_dsc_r(_dsc_c())"
    prologue = f"_dsc_r = _dsc_sink(); _dsc_c = _dsc_clock; _dsc_r({-gid}); {reading}"
    timed = {id(statement) for statement, _ in wrapper.timed}
    function.body = _statements(prologue, function.body[0]) + _add_readings(function.body, timed, reading)
    function.decorator_list = []
    factory = ast.parse(_TEMPLATE)
    outer = factory.body[0]
    assert isinstance(outer, ast.FunctionDef)
    outer.body = [function, *_statements("return call", function)]
    ast.fix_missing_locations(factory)
    made: dict[str, Any] = {}
    exec(compile(factory, filename, "exec"), namespace, made)
    return made["_dsc_factory"](sink, clock, synchronize)


def timed_replay(run: Callable, gid: int, sink: Callable, clock: Callable) -> Callable:
    """`run` (a compiled graph's callable, inductor's CUDA-graph replay) timed as graph `gid` of one op:
    a header and a reading at its start, a reading at its end (also when it raises). Its kernels run
    without Python, so the replay is the finest thing the CPU side can time; on CUDA the device join
    gives this op every kernel the replay launched (capture/device.py)."""

    def replay(inputs: Any) -> Any:
        record = sink()
        record(-gid)
        record(clock())
        try:
            return run(inputs)
        finally:
            record(clock())

    return replay


REPLAY = "cudagraph_replay"  # the op name of a CUDA-graph replay


def replay_attribution(gm: Any, layer_by_seq: dict[int, tuple[str, str]]) -> dict:
    """The static fields of a CUDA-graph replay's event (kernel fields, `kernel_kind` "cudagraph"): every
    layer and user line of the graph; `layer` is the layers' longest common module path ("" if none)."""
    nodes = [node for node in gm.graph.nodes if node.op == "call_function"]
    layers = _layers(nodes, layer_by_seq)
    names = list(dict.fromkeys(name for name, _ in layers))
    layer = ".".join(_common_start([name.split(".") for name in names]))
    lines = [line for line in (user_line(node) for node in nodes) if line[0]]
    file, number, code = lines[0] if lines else ("", 0, "")
    return {
        "kind": "kernel",
        "kernel_kind": "cudagraph",
        "node": "",
        "target": "",
        "layer": layer,
        "module_type": dict(layers).get(layer, ""),
        "layers": ",".join(names),
        "file": file.rsplit("/", 1)[-1],
        "path": file,
        "line": number,
        "code": code,
        "lines": ",".join(dict.fromkeys(f"{f.rsplit('/', 1)[-1]}:{n}" for f, n, _ in lines)),
    }


def _common_start(paths: list[list[str]]) -> list[str]:
    """The parts every path starts with: ["layer1", "0"] of layer1.0.conv1 and layer1.0.bn1."""
    common = paths[0] if paths else []
    for path in paths[1:]:
        n = 0
        while n < min(len(common), len(path)) and common[n] == path[n]:
            n += 1
        common = common[:n]
    return common


# -- what each kernel covers ---------------------------------------------------------------------


def with_saved_nodes(provenance: dict[str, tuple[list[str], list[str]]], place: tuple[str, str] | None) -> dict:
    """Torch keeps no kernel -> node map for a backward graph in its FX-graph cache; dynascope keeps its own,
    beside inductor's cache (`<cache dir>/dynascope/<graph key>.json`): written when a compile has the
    map, read back when a cache hit lacks it. Inductor's own entries are not touched."""
    if place is None or not provenance:
        return provenance
    path = os.path.join(place[0], "dynascope", f"{place[1]}.json")
    if any(nodes for nodes, _ in provenance.values()):
        if not os.path.exists(path):
            write_json(path, {key: nodes for key, (nodes, _) in provenance.items()})
        return provenance
    saved = read_json(path)
    if not isinstance(saved, dict):
        return provenance
    return {key: (list(saved.get(key) or []), stacks) for key, (_, stacks) in provenance.items()}


def read_json(path: str) -> Any:
    """A record dynascope keeps beside inductor's cache, or None where it is missing or unreadable."""
    try:
        with fileio.real_open(path, encoding="utf-8") as handle:  # ours: not the program's I/O
            return json.load(handle)
    except (OSError, ValueError):
        return None


def write_json(path: str, data: dict) -> None:
    """Write a record beside inductor's cache, atomically; a read-only cache directory only means that
    warm runs work it out again."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temporary = f"{path}.{os.getpid()}.tmp"
        with fileio.real_open(temporary, "w", encoding="utf-8") as out:
            json.dump(data, out)
        os.replace(temporary, path)
    except (OSError, TypeError, ValueError):
        pass


def _base(name: str) -> str:
    return name.rsplit(":", 1)[0].removeprefix("torch.ops.")


def match_provenance(calls: list[KernelCall], provenance: dict[str, tuple[list[str], list[str]]]) -> list[tuple]:
    """Each call's (post-grad node names, stack traces): inductor numbers every kernel it emits
    (`<name>:<handle>`, in emission order), so the k-th call of a kernel name is its k-th entry."""
    queues: dict[str, list[tuple]] = {}
    for key, entry in provenance.items():
        queues.setdefault(_base(key), []).append(entry)
    out = []
    for call in calls:
        queue = queues.get(_base(call.name))
        out.append(queue.pop(0) if queue else ([], []))
    return out


def _last_frame(stack: str) -> str:
    """The innermost frame of a stack trace without its line number, which a cached graph may have from
    before the user's file was edited."""
    at = stack.rfind('File "')
    return _LINE_NUMBER.sub(",", stack[at:].strip() if at >= 0 else stack.strip(), count=1)


def _by_last_frame(gm: Any) -> dict[str, list[Any]]:
    nodes: dict[str, list[Any]] = {}
    for node in gm.graph.nodes:
        trace = node.meta.get("stack_trace")
        if trace:
            nodes.setdefault(_last_frame(trace), []).append(node)
    return nodes


def _majority(values: list[str]) -> str:
    """The value most nodes share; a tie goes to the earliest in graph order."""
    counts = {v: values.count(v) for v in values}
    return max(counts, key=lambda v: (counts[v], -values.index(v)), default="")


def _layers(nodes: list[Any], layer_by_seq: dict[int, tuple[str, str]]) -> list[tuple[str, str]]:
    """(layer, module type) of each node that has one; a backward node's from its forward node's seq_nr."""
    layers = []
    for node in nodes:
        layer, module_type = module_of(node)
        if not layer and node.meta.get("seq_nr") in layer_by_seq:
            layer, module_type = layer_by_seq[node.meta["seq_nr"]]
        if layer:
            layers.append((layer, module_type))
    return layers


def _own_nodes(call: KernelCall, nodes: list[Any]) -> list[Any]:
    """An extern or fallback kernel's own op among the nodes it covers (`extern_kernels.mm` -> the
    aten.mm nodes): inductor lists every node folded into it, which may be mostly other layers'."""
    if call.kind == "generated":
        return []
    op = call.name.split(".")[1]  # extern_kernels.<op>, aten.<op>.<overload>
    return [node for node in nodes if target_text(node).split(".")[1:2] == [op]]


def borrow_layers(fields: list[dict], consumers: list[int | None]) -> None:
    """A kernel that computes no op of the user's graph (a weight's layout conversion: its only node is
    a graph input) counts under the layer of the first later kernel that reads a buffer it made."""
    for k in reversed(range(len(fields))):
        own = fields[k]
        consumer = consumers[k]
        if own["target"] or own["lines"] or own["layer"] or consumer is None:
            continue
        if fields[consumer]["layer"]:
            own["layer"], own["module_type"] = fields[consumer]["layer"], fields[consumer]["module_type"]
            own["layers"] = own["layer"]


def kernel_attribution(call: KernelCall, names: list[str], stacks: list[str], gm: Any,
                       layer_by_seq: dict[int, tuple[str, str]]) -> dict:  # fmt: skip
    """The static fields of one kernel event (docs/trace-format.md, "Kernel events")."""
    by_name = {node.name: node for node in gm.graph.nodes}
    nodes = [by_name[n] for n in names if n in by_name]
    near = nodes
    if not nodes and stacks:  # a backward graph from the FX-graph cache: torch keeps no node names for it,
        by_frame = _by_last_frame(gm)  # so its layers are those of the nodes made at its source lines
        near = [node for stack in stacks for node in by_frame.get(_last_frame(stack), [])]
    layers = _layers(near, layer_by_seq)
    layer = _majority([name for name, _ in _layers(_own_nodes(call, near), layer_by_seq) or layers])
    # the nodes' own lines are this run's; a cached graph's stack traces keep the lines of its first compile
    lines = [line for line in (user_line(node) for node in near) if line[0]] or [stack_line(s) for s in stacks]
    lines = [line for line in lines if line[0]]
    file, number, code = lines[0] if lines else ("", 0, "")
    return {
        "kind": "kernel",
        "kernel_kind": call.kind,
        "node": ",".join(names),
        "target": ",".join(dict.fromkeys(target_text(node) for node in nodes if node.op == "call_function")),
        "layer": layer,
        "module_type": dict(layers).get(layer, ""),
        "layers": ",".join(dict.fromkeys(name for name, _ in layers)),
        "file": file.rsplit("/", 1)[-1],
        "path": file,
        "line": number,
        "code": code,
        "lines": ",".join(dict.fromkeys(f"{f.rsplit('/', 1)[-1]}:{n}" for f, n, _ in lines)),
        **(comm_fields_of(nodes, call.name) if call.kind == "fallback" else {}),
    }

