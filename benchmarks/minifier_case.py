"""A user's script with a planted backend bug, for torch's minifier (run by bench_bisect.py).

    TORCHDYNAMO_REPRO_AFTER=aot TORCHDYNAMO_REPRO_LEVEL=4 python minifier_case.py linear plain

One forward and backward of the case's model compiled with its planted backend. How the backend is
handed to torch.compile:
  plain    the backend object itself (what a user writes first)
  wrapped  its forward compiler wrapped in torch._dynamo.repro.after_aot.wrap_compiler_debug (named
           "inductor", the only name its accuracy check accepts): the hook REPRO_AFTER="aot" puts
           around inductor, put around this backend instead, so that the minifier looks at it
  named    the backend by its registered name (REPRO_AFTER="dynamo" needs a name to find it again)
Prints one JSON line: whether the run raised, and what.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import planted_bugs
import torch


def backend_for(case: str, how: str):
    backend = planted_bugs.CASES[case][2]
    if how == "plain":
        return backend
    if how == "named":
        return backend.__name__
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.repro.after_aot import wrap_compiler_debug
    from torch._functorch.aot_autograd import make_boxed_func

    fw = wrap_compiler_debug(backend.fw_compiler, compiler_name="inductor")

    def bw(gm, example_inputs):
        return make_boxed_func(gm.forward)

    return aot_autograd(fw_compiler=fw, bw_compiler=bw)


def main() -> int:
    case, how = sys.argv[1], sys.argv[2]
    make_model, make_input = planted_bugs.CASES[case][:2]
    model, x = make_model(), make_input()
    compiled = torch.compile(model, backend=backend_for(case, how))
    outcome = {"raised": None}
    try:
        out = compiled(x)
        out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(2)))
    except Exception as exc:  # noqa: BLE001 - what the minifier raises is the outcome
        outcome["raised"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        outcome["minifier_path"] = getattr(exc, "minifier_path", None)
    print(json.dumps(outcome), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
