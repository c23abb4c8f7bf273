"""A standalone repro of a graph a stage gets wrong: a directory with `repro.py` (the graph as plain
Python, the stage, the comparison) and `inputs.pt` (its recorded inputs). `python repro.py` exits 1
while the bug is there and 0 once it is gone; it needs torch only.

Before writing, the graph is shrunk while it still fails the same way (the same error, or a result
beyond tolerance): first to the culprit op alone on its recorded input values, else to the culprit
and the ops it depends on, else the whole graph.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dynascope import _torch
from dynascope.debug.bisect import graphs
from dynascope.debug.bisect.compare import TOLERANCES
from dynascope.debug.bisect.execute import differs, first_line, root_error, run, same_error
from dynascope.debug.bisect.localize import GraphVerdict, Op
from dynascope.debug.bisect.record import CapturedGraph
from dynascope.debug.bisect.stages import Stage, importable

REPRO = "repro.py"
INPUTS = "inputs.pt"


@dataclass
class Written:
    directory: str
    size: int  # computing nodes of the written graph
    size_before: int
    compiles: int
    gm: Any = None  # the written graph and its inputs
    inputs: Any = None


def write_repro(directory: str, graph: CapturedGraph, stage: Stage, op: Op, verdict: GraphVerdict,
                say: Callable[[str], None]) -> Written:  # fmt: skip
    """Shrink `graph` while it fails as `verdict` says, and write the repro into `directory`."""
    error = verdict.staged.error
    inputs = graph.best_inputs
    compiles = 0

    def fails(gm: Any, values: list) -> bool:
        nonlocal compiles
        compiles += 1
        staged = run(gm, values, stage)
        if error is not None:
            return same_error(error, staged.error)
        return not staged.failed and differs(run(gm, values), staged) is not None

    before = graphs.size(graph.gm)
    gm, values = graph.gm, inputs
    for candidate in _smaller(graph.gm, inputs, op.node):
        if fails(*candidate):
            gm, values = candidate
            break
    size = graphs.size(gm)
    say(f"repro: {before} ops -> {size} op{'s' if size != 1 else ''} ({directory})")
    os.makedirs(directory, exist_ok=True)
    import torch

    torch.save({"inputs": values, "attributes": _attributes(gm)}, os.path.join(directory, INPUTS))
    with open(os.path.join(directory, REPRO), "w", encoding="utf-8") as out:
        out.write(_source(gm, stage, op, error))
    return Written(directory, size, before, compiles, gm, values)


def _smaller(gm: Any, inputs: list, culprit: str) -> list[tuple[Any, list]]:
    """Smaller graphs to try, smallest first: the culprit alone on its recorded input values, then the
    culprit with the ops it depends on."""
    out = []
    node = next(n for n in gm.graph.nodes if n.name == culprit)
    parents = [p.name for p in node.all_input_nodes]
    try:
        values = graphs.interpret(gm, inputs, parents)
        alone, names = graphs.cut_above(gm, culprit, values)
        by_name = dict(zip((n.name for n in gm.graph.nodes if n.op == "placeholder"), inputs, strict=False))
        fed = [_as_recorded(values[n], p, by_name) for n, p in zip(names, node.all_input_nodes, strict=True)]
        out.append((alone, fed))
    except Exception:  # noqa: BLE001 - a node that cannot stand alone (e.g. a view of an input): try the next
        pass
    out.append((graphs.returning(gm, [culprit]), inputs))
    return out


def _as_recorded(value: Any, node: Any, inputs: dict[str, Any]) -> Any:
    """A value as an input of the cut graph: a graph input as it was recorded (a parameter stays one),
    an intermediate requiring grad where it did in the real run."""
    import torch

    from dynascope.debug.bisect.execute import fresh

    if node.op == "placeholder" and node.name in inputs:
        return fresh(inputs[node.name])
    if not isinstance(value, torch.Tensor):
        return value
    example = node.meta.get("example_value")
    wants_grad = bool(getattr(example, "requires_grad", False)) and value.is_floating_point()
    return value.detach().clone().requires_grad_(wants_grad)


def _attributes(gm: Any) -> dict[str, Any]:
    """What the graph's get_attr and call_module nodes refer to, by their dotted names."""
    out = {}
    for node in gm.graph.nodes:
        if node.op in ("get_attr", "call_module"):
            owner = gm
            for part in str(node.target).split("."):
                owner = getattr(owner, part)
            out[str(node.target)] = owner
    return out


def _stage_expr(stage: Stage) -> tuple[str, str]:
    """(import lines, expression) that give the stage's backend in the repro; the backend's module
    is found where it was (its directory goes on sys.path) when it is not installed."""
    import sys

    if isinstance(stage.backend, str):
        return "", repr(stage.backend)
    found = importable(stage.backend)
    if found is None:
        return "", f"None  # the backend {stage.name!r} cannot be imported: assign it here"
    module, name = found
    path = getattr(sys.modules[module], "__file__", None) or ""
    root = os.path.dirname(os.path.abspath(path))
    for _ in range(module.count(".")):
        root = os.path.dirname(root)
    installed = not path or "site-packages" in path
    setup = "" if installed else f"sys.path.insert(0, {root!r})  # where {module} was imported from\n"
    return f"{setup}from {module} import {name}\n", name


def _source(gm: Any, stage: Stage, op: Op, error: BaseException | None) -> str:
    imports, forward = _torch.fx_code(gm)
    stage_import, stage_expr = _stage_expr(stage)
    body = "\n".join("    " + line if line.strip() else "" for line in forward.splitlines())
    where = ", ".join(x for x in (f"layer {op.layer}" if op.layer else "", op.source) if x)
    expected = f"{type(root_error(error)).__name__}: {first_line(error)}" if error is not None else ""
    return _TEMPLATE.format(
        date=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        stage=stage.name, kind="exception" if error is not None else "accuracy", target=op.target, node=op.node,
        where=f" ({where})" if where else "", imports=imports.strip(), stage_import=stage_import, body=body,
        backend=stage_expr, expected=repr(expected), tolerances=repr(TOLERANCES), inputs=INPUTS,
    )  # fmt: skip


_TEMPLATE = '''"""Standalone repro written by dynascope bisect ({date}).

Stage {stage!r} gives a wrong result ({kind}) at {target} (node {node}){where}.
Run `python repro.py`: it exits 1 while the bug is there and 0 once it is gone. Needs torch only.
"""

import os
import re
import sys

{imports}
{stage_import}

class Repro(torch.nn.Module):
    def __init__(self, attributes):
        super().__init__()
        for name, value in attributes.items():
            *path, last = name.split(".")
            owner = self
            for part in path:
                if not hasattr(owner, part):
                    owner.add_module(part, torch.nn.Module())
                owner = getattr(owner, part)
            setattr(owner, last, value)

{body}


BACKEND = {backend}
EXPECTED_ERROR = {expected}  # the error the stage raised when the repro was written ("" for accuracy)
TOLERANCES = {tolerances}  # dtype: (rtol, atol)


def fresh(inputs):
    out = []
    for v in inputs:
        if isinstance(v, torch.nn.Parameter):  # compilers treat parameters as static inputs
            out.append(torch.nn.Parameter(v.detach().clone(), requires_grad=v.requires_grad))
        elif isinstance(v, torch.Tensor):
            out.append(v.detach().clone().requires_grad_(v.requires_grad and v.is_floating_point()))
        else:
            out.append(v)
    return out


def run(model, inputs):
    torch.manual_seed(0)
    args = fresh(inputs)
    out = model(*args)
    outs = [o for o in (out if isinstance(out, (list, tuple)) else [out]) if isinstance(o, torch.Tensor)]
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    needs = [o for o in outs if o.requires_grad and o.is_floating_point()]
    grads = []
    if leaves and needs:
        generator = torch.Generator().manual_seed(1)
        cotangents = [torch.randn(o.shape, generator=generator, dtype=torch.float32).to(o.dtype) for o in needs]
        grads = torch.autograd.grad(needs, leaves, cotangents, allow_unused=True)
    return [o.detach() for o in outs], [g for g in grads if g is not None]


def worst(expected, actual):
    for kind, left, right in (("output", expected[0], actual[0]), ("gradient", expected[1], actual[1])):
        if len(left) != len(right):
            return f"{{kind}}s: {{len(left)}} expected, {{len(right)}} given"
        for i, (a, b) in enumerate(zip(left, right)):
            if a.shape != b.shape:
                return f"{{kind}} {{i}}: shape {{tuple(b.shape)}} instead of {{tuple(a.shape)}}"
            rtol, atol = TOLERANCES.get(str(a.dtype).replace("torch.", ""), (0.0, 0.0))
            a64, b64 = a.double(), b.double()
            if not torch.allclose(b64, a64, rtol=rtol, atol=atol, equal_nan=True):
                diff = (b64 - a64).abs()
                rel = (diff / a64.abs().clamp_min(max(atol, 1e-12))).max().item()
                return (f"{{kind}} {{i}}: max abs error {{diff.max().item():.3g}}, max rel error {{rel:.3g}} "
                        f"(rtol {{rtol:g}}, atol {{atol:g}})")
    return None


def main():
    if BACKEND is None:
        print("the backend is not set: assign BACKEND at the top of this file")
        return 2
    try:
        import torch._inductor.config as inductor_config
        inductor_config.fallback_random = True  # random ops draw eager's numbers
        inductor_config.fx_graph_cache = False  # compile afresh: a cached compile may predate a fix
        import torch._functorch.config as functorch_config
        functorch_config.enable_autograd_cache = False
    except (ImportError, AttributeError):
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    saved = torch.load(os.path.join(here, {inputs!r}), weights_only=False)
    model = Repro(saved["attributes"])
    expected = run(model, saved["inputs"])
    try:
        actual = run(torch.compile(model, backend=BACKEND, fullgraph=True), saved["inputs"])
    except Exception as exc:
        inner = getattr(exc, "inner_exception", None) or exc
        text = str(inner).strip().splitlines()[0] if str(inner).strip() else ""
        found = f"{{type(inner).__name__}}: {{text}}"
        same = re.sub(r"\\d+", "#", found) == re.sub(r"\\d+", "#", EXPECTED_ERROR)
        print(("FAIL: the stage raises " if same else "FAIL: the stage raises another error than recorded: ") + found)
        return 1
    if EXPECTED_ERROR:
        print(f"OK: the stage no longer raises {{EXPECTED_ERROR}}")
        return 0
    problem = worst(expected, actual)
    print(f"FAIL: {{problem}}" if problem else "OK: the stage agrees with eager")
    return 1 if problem else 0


if __name__ == "__main__":
    sys.exit(main())
'''
