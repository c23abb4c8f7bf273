"""Backends with planted bugs, importable by a repro in a fresh process (`planted:perturb_relu`).

Each bug is live while the environment variable PLANTED_BUG is not "0", so a test can show that the
repro stops failing once the bug is gone."""

from __future__ import annotations

import os

import torch


def _live() -> bool:
    return os.environ.get("PLANTED_BUG", "1") != "0"


def _perturbing(name: str, scale: float):
    def backend(gm: torch.fx.GraphModule, example_inputs):
        if _live():
            for node in list(gm.graph.nodes):
                if node.op == "call_function" and getattr(node.target, "__name__", "") == name:
                    with gm.graph.inserting_after(node):
                        scaled = gm.graph.call_function(torch.mul, (node, 1.0 + scale))
                    node.replace_all_uses_with(scaled, delete_user_cb=lambda user, new=scaled: user is not new)
                    break
            gm.recompile()
        return gm.forward

    backend.__name__ = f"perturb_{name}"
    return backend


perturb_relu = _perturbing("relu", 1e-3)  # a small error: 0.1 % on one op
perturb_relu_large = _perturbing("relu", 1.0)
perturb_sigmoid = _perturbing("sigmoid", 0.5)


def raise_on_sigmoid(gm: torch.fx.GraphModule, example_inputs):
    if _live():
        for node in gm.graph.nodes:
            if node.op == "call_function" and "sigmoid" in getattr(node.target, "__name__", ""):
                raise NotImplementedError("planted: this backend cannot compile sigmoid")
    return gm.forward


def break_silu_decomposition():
    """Make inductor's decomposition of aten.silu wrong (what aot_eager_decomp_partition and inductor
    use; aot_eager does not decompose)."""
    from torch._inductor.decomposition import decompositions

    decompositions[torch.ops.aten.silu.default] = lambda x: x * torch.sigmoid(x) * 1.5


def restore_silu_decomposition(saved):
    from torch._inductor.decomposition import decompositions

    decompositions[torch.ops.aten.silu.default] = saved


def break_relu_lowering():
    """Make inductor lower aten.relu wrongly (max(x, 0) * 1.5): only inductor gets it wrong. Returns
    what to restore."""
    from torch._inductor import lowering

    aten = torch.ops.aten
    saved = lowering.lowerings[aten.relu.default]

    def wrong(x):
        return lowering.lowerings[aten.mul.Tensor](saved(x), 1.5)

    lowering.lowerings[aten.relu.default] = wrong
    return saved


def restore_relu_lowering(saved):
    from torch._inductor import lowering

    lowering.lowerings[torch.ops.aten.relu.default] = saved
