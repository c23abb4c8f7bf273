"""Graph surgery for localising and shrinking: copies of a captured FX graph that return other values.

Every function returns a new GraphModule and leaves the one it was given alone. Node names are kept,
so a node found in a derived graph is found by name in the original.
"""

from __future__ import annotations

import copy
from typing import Any

COMPUTING = ("call_function", "call_method", "call_module")


def is_tensor_node(node: Any) -> bool:
    """Whether a node computes one tensor (its recorded example value is one)."""
    import torch

    value = node.meta.get("example_value", node.meta.get("val"))
    return node.op in COMPUTING and isinstance(value, torch.Tensor)


def computing_nodes(gm: Any) -> list[Any]:
    """The nodes of a graph that compute a tensor, in graph order: the candidates for a culprit."""
    return [node for node in gm.graph.nodes if is_tensor_node(node)]


def returning(gm: Any, names: list[str]) -> Any:
    """A copy of `gm` that returns the values of the named nodes (a tuple, in that order), with every
    node they do not need removed."""
    import torch

    new = copy.deepcopy(gm)
    by_name = {node.name: node for node in new.graph.nodes}
    output = next(node for node in new.graph.nodes if node.op == "output")
    output.args = (tuple(by_name[name] for name in names),)
    new.graph.eliminate_dead_code()
    new.graph.lint()
    return torch.fx.GraphModule(new, new.graph)


def standalone(gm: Any) -> Any:
    """A plain GraphModule copy of `gm` (not a lazy one, whose forward Dynamo refuses to trace)."""
    import torch

    owner = copy.deepcopy(gm)
    return torch.fx.GraphModule(owner, owner.graph)


def size(gm: Any) -> int:
    """Nodes that compute something: the size a repro is measured in."""
    return sum(1 for node in gm.graph.nodes if node.op in COMPUTING)


def cut_above(gm: Any, keep: str, values: dict[str, Any]) -> tuple[Any, list[str]]:
    """A graph computing only node `keep` from the nodes feeding it, which become placeholders (their
    recorded `values` are the new inputs). Returns the graph and its placeholder names in order."""
    import torch

    node = next(n for n in gm.graph.nodes if n.name == keep)
    graph = torch.fx.Graph()
    env: dict[Any, Any] = {}
    names: list[str] = []
    for parent in node.all_input_nodes:
        placeholder = graph.placeholder(parent.name)
        placeholder.meta = dict(parent.meta)
        env[parent] = placeholder
        names.append(parent.name)
    copied = graph.node_copy(node, lambda n: env[n])
    graph.output((copied,))
    owner = torch.nn.Module()
    for attr in _attributes(node, gm):
        _copy_attribute(gm, owner, attr)
    new = torch.fx.GraphModule(owner, graph)
    missing = [name for name in names if name not in values]
    if missing:
        raise KeyError(f"no recorded value for {missing}")
    return new, names


def _attributes(node: Any, gm: Any) -> list[str]:
    return [node.target] if node.op == "call_module" else []


def _copy_attribute(gm: Any, owner: Any, target: str) -> None:
    *path, last = target.split(".")
    source, dest = gm, owner
    import torch

    for part in path:
        source = getattr(source, part)
        if not hasattr(dest, part):
            setattr(dest, part, torch.nn.Module())
        dest = getattr(dest, part)
    setattr(dest, last, getattr(source, last))


def interpret(gm: Any, inputs: list, names: list[str]) -> dict[str, Any]:
    """Run `gm` eagerly on `inputs` and keep the values of the named nodes (for cutting a graph)."""
    import torch

    wanted = set(names)
    kept: dict[str, Any] = {}

    class Keep(torch.fx.Interpreter):
        def run_node(self, n: Any) -> Any:
            value = super().run_node(n)
            if n.name in wanted:
                kept[n.name] = value
            return value

    with torch.no_grad():
        Keep(gm).run(*inputs)
    return kept
