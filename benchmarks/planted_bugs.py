"""The two models of the bisect benchmark and AOT-level backends that each get one op wrong.

A planted backend is `aot_autograd(fw_compiler=..., bw_compiler=...)`: its forward compiler scales
the output of one chosen aten op by 1.5 and leaves the rest of the graph as it is; the backward
compiler changes nothing. The bug therefore lives after AOTAutograd, where torch's minifier looks
with TORCHDYNAMO_REPRO_AFTER="aot".

Importable by the benchmark, by its minifier subprocesses and by the repros both tools write. Each
backend is also registered with Dynamo by name (`planted_linear_relu10`, `planted_convnet_conv2`),
so that a minifier launcher can look it up. With PLANTED_COUNT_FILE set, every call of a planted
compiler appends one line to that file ("dynamo", "bw", or "fw NODE" with the name of the node it
scaled, "-" for none): the count of compilations.
"""

from __future__ import annotations

import copy
import os

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.backends.registry import register_backend
from torch._functorch.aot_autograd import make_boxed_func

SCALE = 1.5


def linear_model() -> torch.nn.Module:
    """20 x (Linear(16,16), ReLU): the capture benchmark's model."""
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(20):
        layers += [torch.nn.Linear(16, 16), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def linear_input() -> torch.Tensor:
    return torch.randn(8, 16, generator=torch.Generator().manual_seed(1))


def convnet() -> torch.nn.Module:
    from dynascope.demo.train import ConvNet

    torch.manual_seed(0)
    return ConvNet()


def convnet_input() -> torch.Tensor:
    return torch.randn(16, 1, 28, 28, generator=torch.Generator().manual_seed(1))


def _count(what: str) -> None:
    path = os.environ.get("PLANTED_COUNT_FILE")
    if path:
        with open(path, "a") as out:
            out.write(what + "\n")


def _live() -> bool:
    return os.environ.get("PLANTED_BUG", "1") != "0"


def _scale_one(gm: torch.fx.GraphModule, pick) -> str | None:
    """Scale the output of the first node `pick` accepts (pick(node, index among nodes of its target))."""
    seen: dict = {}
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        index = seen[node.target] = seen.get(node.target, 0) + 1
        if pick(node, index):
            with gm.graph.inserting_after(node):
                scaled = gm.graph.call_function(torch.ops.aten.mul.Tensor, (node, SCALE))
            node.replace_all_uses_with(scaled, delete_user_cb=lambda user, new=scaled: user is not new)
            gm.recompile()
            return node.name
    return None


def _planted(name: str, pick):
    def fw_compiler(gm: torch.fx.GraphModule, example_inputs, **kwargs):  # kwargs: what a wrapper adds
        if not _live():
            _count("fw -")
            return make_boxed_func(gm)
        gm = copy.deepcopy(gm)  # a copy: torch's accuracy check compares with the graph it handed over
        _count(f"fw {_scale_one(gm, pick) or '-'}")  # the node it got wrong, by name
        return make_boxed_func(gm)

    def bw_compiler(gm: torch.fx.GraphModule, example_inputs, **kwargs):
        _count("bw")
        return make_boxed_func(gm)

    aot = aot_autograd(fw_compiler=fw_compiler, bw_compiler=bw_compiler)

    def backend(gm: torch.fx.GraphModule, example_inputs):
        _count("dynamo")
        return aot(gm, example_inputs)

    backend.__name__ = name
    backend.fw_compiler = fw_compiler  # for a user who wraps it for the AOT minifier
    register_backend(compiler_fn=backend, name=name)
    return backend


# the 10th aten.relu of the forward graph: layer 19 of the Sequential
planted_linear_relu10 = _planted(
    "planted_linear_relu10", lambda node, index: node.target == torch.ops.aten.relu.default and index == 10
)


def _is_conv2(node: torch.fx.Node, index: int) -> bool:
    if node.target != torch.ops.aten.convolution.default:
        return False
    weight = node.args[1].meta.get("val") if isinstance(node.args[1], torch.fx.Node) else None
    return weight is not None and tuple(weight.shape[:2]) == (16, 8)


# the convolution with 8 input and 16 output channels: ConvNet.conv2
planted_convnet_conv2 = _planted("planted_convnet_conv2", _is_conv2)

CASES = {
    # name: (model, input, backend, the layer it plants the bug in, the aten op)
    "linear": (linear_model, linear_input, planted_linear_relu10, "19", "aten.relu"),
    "convnet": (convnet, convnet_input, planted_convnet_conv2, "conv2", "aten.convolution"),
}
