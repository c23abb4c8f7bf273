"""What each traced FX node is: its event name and attribution, computed once at compile time."""

from __future__ import annotations

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
    from .. import _torch

    return _UUID_SUFFIX.sub("", _torch.graph_name(gm) or type(gm).__name__)


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
    """(file, line, source text) of the innermost frame of a Python stack trace text."""
    lines = trace.rstrip().splitlines()
    for i in range(len(lines) - 1, -1, -1):
        match = _FILE_LINE.search(lines[i])
        if match:
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            return match["file"], int(match["line"]), code
    return "", 0, ""


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
    return attrs


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
