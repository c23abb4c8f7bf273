"""A custom torch.compile backend with a bug, to try `dynascope bisect` on (see examples/bisect_example.py).

It works at the ATen level, as real backends do (AOTAutograd hands it the forward and backward graphs),
and it computes the forward graph's ReLUs 10% too large.
"""

import torch
from torch._dynamo.backends.common import aot_autograd


def _scale_relus(gm: torch.fx.GraphModule, example_inputs):
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target is torch.ops.aten.relu.default:
            with gm.graph.inserting_after(node):
                scaled = gm.graph.call_function(torch.ops.aten.mul.Tensor, (node, 1.1))
            node.replace_all_uses_with(scaled, delete_user_cb=lambda user, new=scaled: user is not new)
    gm.recompile()
    return gm.forward


def _as_is(gm: torch.fx.GraphModule, example_inputs):
    return gm.forward


buggy_backend = aot_autograd(fw_compiler=_scale_relus, bw_compiler=_as_is)
