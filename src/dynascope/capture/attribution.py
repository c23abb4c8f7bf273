"""What each traced FX node is: its event name and attribution, computed once at compile time."""

from __future__ import annotations

import functools
import os
import re
from typing import Any

_FILE_LINE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_ROOT = re.compile(r"^(?:L|G)\[['\"][^'\"]*['\"]\]\.?")
_KEY = re.compile(r"\[['\"]([^'\"]+)['\"]\]")
_INDEX = re.compile(r"\[(\d+)\]")

TRACED_OPS = ("call_function", "call_method", "call_module")
_UUID_SUFFIX = re.compile(r"(_[0-9a-f]{8}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{12})$")


def graph_label(gm: Any) -> str:
    """The Dynamo graph's name as users see it in logs ("__compiled_fn_3"), without a uuid suffix."""
    from dynascope import _torch

    return plain_graph_name(_torch.graph_name(gm)) or type(gm).__name__


def plain_graph_name(name: str | None) -> str | None:
    """"__compiled_fn_3_<uuid>" -> "__compiled_fn_3"."""
    return None if name is None else _UUID_SUFFIX.sub("", name)


def event_name(node: Any, gm: Any) -> str:
    """pydftracer's names: function.<target>, method.<name>, <module path>.<ModuleType>_<target>."""
    if node.op == "call_function":
        return "function." + getattr(node.target, "__name__", str(node.target))
    if node.op == "call_method":
        return "method." + str(node.target).replace(".", "_")
    if node.op == "call_module":
        try:
            module_type = type(gm.get_submodule(node.target)).__name__
        except AttributeError:
            module_type = "Module"
        return f"{node.target}.{module_type}_{str(node.target).replace('.', '_')}"
    return f"{node.op}.{node.target}"


def clean_module_path(path: str) -> str:
    """Dynamo's "L['self'].blocks[0]._modules['fc']" -> "blocks.0.fc" (torch 2.5.1 spells every
    level "._modules['name']", "L['self']._modules['layers']" included)."""
    path = path.replace("._modules", "")
    path = _ROOT.sub("", path)
    path = _KEY.sub(r".\1", path)
    path = _INDEX.sub(r".\1", path)
    return path.strip(".")


def module_of(node: Any) -> tuple[str, str]:
    """(layer path, module type name) of the innermost module the node ran in, or ("", "")."""
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return "", ""
    path, module_type = list(stack.values())[-1]
    type_name = module_type.__name__ if isinstance(module_type, type) else str(module_type).rsplit(".", 1)[-1]
    return clean_module_path(str(path)), type_name


def user_line(node: Any) -> tuple[str, int, str]:
    """(file, line, source text) of the user's code that produced the node, from its stack trace."""
    return stack_line(node.meta.get("stack_trace") or "")


def stack_line(trace: str) -> tuple[str, int, str]:
    """(file, line, source text) of the innermost frame of a Python stack trace text that is not torch's own
    (some torch releases keep the frames of torch's wrappers Dynamo traced through, such as a custom op's
    __call__, in a node's stack trace); the innermost frame where every frame is torch's."""
    lines = trace.rstrip().splitlines()
    innermost = None
    for i in range(len(lines) - 1, -1, -1):
        match = _FILE_LINE.search(lines[i])
        if match:
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            frame = match["file"], int(match["line"]), code
            if not _is_torch_file(match["file"]):
                return frame
            innermost = innermost or frame
    return innermost or ("", 0, "")


@functools.cache
def _torch_dir() -> str:
    from dynascope import _torch

    return _torch.torch_package_dir() + os.sep


def _is_torch_file(path: str) -> bool:
    return os.path.abspath(path).startswith(_torch_dir())


def target_text(node: Any) -> str:
    target = node.target
    if isinstance(target, str):
        return target
    module = getattr(target, "__module__", None)
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    text = str(target)
    if text.startswith("<") and name:  # <built-in function linear> -> torch._C._nn.linear
        if name.startswith("_VariableFunctionsClass."):  # torch.sigmoid and the other torch.* builtins
            return "torch." + name.split(".", 1)[1]
        return f"{module}.{name}" if module else name
    return text


def _shape_text(value: Any) -> tuple[str, str] | None:
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return None
    dims = ",".join(str(d) for d in shape)
    return f"[{dims}]", str(dtype).replace("torch.", "")


def input_shapes(node: Any) -> tuple[str, str]:
    """Shapes and dtypes of the node's tensor inputs from compile-time metadata ("s0" for symbolic)."""
    shapes, dtypes = [], []
    for arg in node.all_input_nodes:
        described = _shape_text(arg.meta.get("val", arg.meta.get("example_value")))
        if described:
            shapes.append(described[0])
            dtypes.append(described[1])
    return "[" + ",".join(shapes) + "]", "[" + ",".join(dtypes) + "]"


def attribution(node: Any, gm: Any, layer_by_seq: dict[int, tuple[str, str]] | None, record_shapes: bool) -> dict:
    """The static fields of one op event (docs/trace-format.md, "Attribution fields")."""
    layer, module_type = module_of(node)
    seq_nr = node.meta.get("seq_nr")
    if not layer and layer_by_seq is not None and seq_nr in layer_by_seq:
        layer, module_type = layer_by_seq[seq_nr]
    file, line, code = user_line(node)
    attrs = {
        "kind": "op",
        "node": node.name,
        "op_type": node.op,
        "target": target_text(node),
        "layer": layer,
        "module_type": module_type,
        "file": os.path.basename(file) if file else "",
        "path": file,
        "line": line,
        "code": code,
    }
    if record_shapes:
        attrs["shapes"], attrs["dtypes"] = input_shapes(node)
    attrs.update(comm_fields(node))
    return attrs


# ------------------------------------------------------------------------------------------------
# functional collectives in a compiled graph (docs/trace-format.md, "Collectives in compiled graphs")

_COMM_NAMESPACES = ("_c10d_functional", "c10d_functional")
_WAIT = "wait_tensor"


def _comm_op(node: Any) -> str | None:
    """"all_reduce" for a node of torch.ops._c10d_functional.all_reduce(_).default, "wait_tensor" for a
    wait; None for any other node."""
    if node.op != "call_function":
        return None
    # an OpOverload prints as "_c10d_functional.all_reduce_.default" (AOT graphs), an OpOverloadPacket (the
    # Dynamo graph) as "_c10d_functional.all_reduce"
    parts = str(node.target).split(".")
    if len(parts) < 2 or parts[0] not in _COMM_NAMESPACES:
        return None
    return parts[1].removesuffix("_") or None  # all_reduce_ (in place, as dist.all_reduce traces) is an all_reduce


def _tensor_bytes(value: Any) -> int:
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(v) for v in value)
    try:
        return int(value.numel()) * int(value.element_size())
    except Exception:  # noqa: BLE001 - not a tensor, or a symbolic size: unknown
        return -1 if hasattr(value, "numel") else 0


def _meta_value(node: Any) -> Any:
    meta = getattr(node, "meta", None) or {}
    return meta.get("val", meta.get("example_value"))


def _group_name(node: Any) -> str:
    """The collective's process group name: its schema's `group_name` argument."""
    if "group_name" in node.kwargs:
        return str(node.kwargs["group_name"])
    schema = getattr(node.target, "_schema", None)
    for i, argument in enumerate(getattr(schema, "arguments", []) or []):
        if argument.name == "group_name" and i < len(node.args):
            return str(node.args[i])
    strings = [a for a in node.args if isinstance(a, str)]
    return strings[-1] if strings else ""


def comm_fields(node: Any) -> dict[str, Any]:
    """`comm_op`, `comm_pg`, `comm_bytes` and `comm_key` of a functional collective's node and of its
    wait_tensor (the collective's: `comm_key` is the collective node's name on both), from the graph's
    compile-time metadata; {} for any other node, and for a wait whose collective is not in this graph."""
    op = _comm_op(node)
    if op is None:
        return {}
    if op == _WAIT:
        source: Any = node.args[0] if node.args else None
        while getattr(source, "op", None) == "call_function" and getattr(source.target, "__name__", "") == "getitem":
            source = source.args[0]  # a coalesced collective's i-th output
        if source is None or not hasattr(source, "target") or _comm_op(source) in (None, _WAIT):
            return {}
        return comm_fields(source)
    first: Any = node.args[0] if node.args else None
    value = [_meta_value(a) for a in first] if isinstance(first, (list, tuple)) else _meta_value(first)
    return {"comm_op": op, "comm_pg": _group_name(node), "comm_bytes": _tensor_bytes(value), "comm_key": node.name}


def comm_fields_of(nodes: list[Any], kernel: str) -> dict[str, Any]:
    """The comm fields of an inductor kernel that calls a functional collective or its wait
    (`_c10d_functional.all_reduce_.default`): those of the node among `nodes` it runs; {} for others."""
    parts = kernel.removeprefix("torch.ops.").split(".")
    if len(parts) < 2 or parts[0] not in _COMM_NAMESPACES:
        return {}
    op = parts[1].removesuffix("_")
    for node in nodes:
        if _comm_op(node) == op:
            return comm_fields(node)
    return {}


def layers_by_seq_nr(gm: Any) -> dict[int, tuple[str, str]]:
    """seq_nr -> (layer, module type) for a forward graph, so backward ops can inherit their layer."""
    mapping: dict[int, tuple[str, str]] = {}
    for node in gm.graph.nodes:
        seq_nr = node.meta.get("seq_nr")
        if seq_nr is None or seq_nr in mapping:
            continue
        layer, module_type = module_of(node)
        if layer:
            mapping[seq_nr] = (layer, module_type)
    return mapping


# ------------------------------------------------------------------------------------------------
# DDPOptimizer's split of a graph at DDP's gradient buckets (docs/trace-format.md, "DDP splits")

_PARAM_LEVEL = re.compile(r"_(?:modules|parameters|buffers)_")


def param_path(name: str) -> str:
    """A parameter's graph input name as its module path: "L_self_modules_layers_modules_0_parameters_weight_"
    -> "layers.0.weight" (names Dynamo gives in another style are kept as they are)."""
    if not _PARAM_LEVEL.search(name):
        return name
    path = _PARAM_LEVEL.sub(".", name.strip("_"))
    return re.sub(r"^[LG]_self\.?", "", path).strip(".")


def ddp_split_fields(split: dict[str, Any], gm: Any = None) -> dict[str, Any]:
    """The graph record's fields of one piece of DDPOptimizer's split (_torch.ddp_split(), index set):
    its place (`ddp_split` of `ddp_splits`, from 1 in forward order), its bucket as DDP numbers them
    (`ddp_bucket`: 0 holds the last layers, whose gradients are ready first), the bucket's parameters
    (`ddp_params`, `ddp_bytes`, `ddp_layers` "first..last" in forward order: that of the piece's
    inputs, `gm`'s placeholders) and the cap in force."""
    index, count = int(split["index"]), int(split["count"])
    bucket = split["buckets"][index]
    names = list(reversed(bucket["params"]))  # DDPOptimizer lists them from the graph's last node
    # the whole graph's inputs (_torch.ddp_split()), else the piece's, named as the whole graph's nodes: its
    # parameters' names in lower case
    inputs = [str(n).lower() for n in split.get("inputs") or []]
    if not inputs and gm is not None:
        inputs = [str(n.target).lower() for n in gm.graph.nodes if n.op == "placeholder"]
    place = {name: i for i, name in enumerate(inputs)}
    names.sort(key=lambda name: place.get(name.lower(), len(place)))
    params = [param_path(p) for p in names]
    layers = params[0] if len(params) == 1 else f"{params[0]}..{params[-1]}" if params else ""
    cap = split.get("cap")
    fields: dict[str, Any] = {"ddp_split": index + 1, "ddp_splits": count, "ddp_bucket": count - 1 - index,
                              "ddp_params": len(params), "ddp_bytes": int(bucket["bytes"]), "ddp_layers": layers}
    if isinstance(cap, int):
        fields["ddp_cap_bytes"] = cap
        fields["ddp_cap_mb"] = round(cap / 2**20, 3)
    return fields
