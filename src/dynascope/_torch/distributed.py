"""torch.distributed: DDPOptimizer's splits, collectives' sequence numbers, DDP's comm hooks and torchrun's
parser (capture/collectives.py, capture/backend.py, launch.py).

Part of dynascope._torch, the one home of torch's private APIs (see its __init__)."""

from __future__ import annotations

import contextlib
import functools
import importlib
import re
import sys
import types
from collections.abc import Callable
from typing import Any

from dynascope._torch.dynamo import skip_frames_of
from dynascope._torch.version import moved, require_torch

# ---------------------------------------------------------------------------------------------
# DDPOptimizer (compiled DistributedDataParallel). Checked on 2.13.0; on another torch a moved piece raises.
# ---------------------------------------------------------------------------------------------


def ddp_split() -> dict[str, Any] | None:
    """Where the current compile is one of DDPOptimizer's: Dynamo hands a graph of a module run inside
    DistributedDataParallel to DDPOptimizer.compile_fn, which splits it at DDP's gradient buckets and calls
    the backend once per piece (torch._dynamo.backends.distributed, checked on 2.13). None when no
    DDPOptimizer compile is on this thread's stack; else {"index": the piece being compiled (0-based, forward
    order; None while compile_fn itself runs, or where it did not split: one bucket), "count": its buckets,
    "cap": bucket_bytes_cap, "first_cap": first_bucket_cap, "buckets": [{"bytes", "params"}] in forward
    order (params: the graph's names of each bucket's parameters), "inputs": the whole graph's input names}.
    Read from compile_fn's frame (its `self`, `gm` and `buckets`) and SubmodCompiler.run_node's (`n`: the
    submodule being compiled)."""
    module = sys.modules.get("torch._dynamo.backends.distributed")
    if module is None:  # never imported: Dynamo imports it for its first DDP compile
        return None
    try:
        compile_code = module.DDPOptimizer.compile_fn.__code__
        run_node_code = module.SubmodCompiler.run_node.__code__
    except AttributeError as exc:
        raise moved("torch._dynamo.backends.distributed.DDPOptimizer.compile_fn and SubmodCompiler.run_node",
                    exc) from exc
    node = None
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code is run_node_code and node is None:
            node = frame.f_locals.get("n")
        elif code is compile_code:
            optimizer = frame.f_locals.get("self")
            buckets = frame.f_locals.get("buckets") or getattr(optimizer, "buckets", None) or []
            match = re.search(r"submod_(\d+)$", str(getattr(node, "target", "")))
            index = int(match.group(1)) if match and len(buckets) > 1 else None
            described = [{"bytes": int(getattr(b, "size", 0)), "params": [str(p) for p in getattr(b, "params", [])]}
                         for b in buckets]  # fmt: skip
            whole = frame.f_locals.get("gm")
            nodes = getattr(getattr(whole, "graph", None), "nodes", [])
            return {
                "inputs": [str(n.target) for n in nodes if getattr(n, "op", None) == "placeholder"],
                "index": index if index is not None and index < len(buckets) else None,
                "count": len(buckets),
                "cap": getattr(optimizer, "bucket_bytes_cap", None),
                "first_cap": getattr(optimizer, "first_bucket_cap", None),
                "buckets": described,
            }
        frame = frame.f_back
    return None


# -- collectives (capture/collectives.py) ----------------------------------------------------------


def sequence_reader(group: Any) -> Callable[[], int] | None:
    """The group's collective counter, as a bound method to call after each collective it issues, or None
    where the backend keeps none (the "fake" test backend). Private:
    ProcessGroup._get_sequence_number_for_group (2.5.1 .. 2.15; gloo and NCCL count every collective)."""
    reader = getattr(group, "_get_sequence_number_for_group", None)
    if reader is None:
        return None
    try:
        reader()
    except RuntimeError:  # "ProcessGroup custom does not yet support sequence numbers"
        return None
    return reader


def dynamo_treats_like(wrapper: Callable, original: Callable) -> Callable[[], None]:
    """Make Dynamo trace a call to `wrapper` exactly as a call to `original`: rewritten to the same
    functional collective (torch.distributed._functional_collectives.traceable_collective_remaps, 2.5.1 ..
    2.15) and given the same trace rule (torch._dynamo.trace_rules.get_torch_obj_rule_map(), 2.5.1 ..
    2.15), so that what Dynamo skips it skips in both. Returns the call that undoes it."""
    undo: list[Callable[[], None]] = []
    try:
        remaps = importlib.import_module("torch.distributed._functional_collectives").traceable_collective_remaps
        trace_rules = importlib.import_module("torch._dynamo.trace_rules")
        rules = trace_rules.get_torch_obj_rule_map()
        rule = trace_rules.lookup(original)
    except (ImportError, AttributeError) as exc:
        raise moved("torch.distributed._functional_collectives.traceable_collective_remaps", exc) from exc
    if original in remaps:
        remaps[wrapper] = remaps[original]
        undo.append(lambda: remaps.pop(wrapper, None))
    if rule is not None and wrapper not in rules:
        rules[wrapper] = rule
        undo.append(lambda: rules.pop(wrapper, None))

    def undo_all() -> None:
        for step in undo:
            step()

    return undo_all


def ddp_register_comm_hook(reducer: Any, state: Any, hook: Callable) -> None:
    """Register a Python comm hook on a DDP reducer, as DistributedDataParallel.register_comm_hook does
    after its own checks. Private: torch.distributed._register_comm_hook (2.5.1 .. 2.15)."""
    dist = importlib.import_module("torch.distributed")
    register = getattr(dist, "_register_comm_hook", None)
    if register is None:
        raise moved("torch.distributed._register_comm_hook")
    register(reducer, state, hook)


def ddp_reducer_in_use(ddp: Any) -> bool:
    """Whether DDP's C++ reducer all-reduces this model's gradients: not where compiled autograd's Python
    reducer does (DistributedDataParallel._use_python_reducer, 2.5.1 .. 2.15) nor where every parameter's
    all-reduce is delayed (_delay_all_reduce_all_params)."""
    if getattr(ddp, "reducer", None) is None:
        return False
    return not (getattr(ddp, "_use_python_reducer", False) or getattr(ddp, "_delay_all_reduce_all_params", False))


def ddp_comm_hook_registration(replacement: Callable) -> Any:
    """A context in which DDP's register_comm_hook / _register_builtin_comm_hook do all their own checks and
    bookkeeping but hand the reducer registration (torch.distributed._register_comm_hook and
    _register_builtin_comm_hook, 2.5.1 .. 2.15, which DDP looks up in torch.distributed at call time) to
    `replacement(kind, reducer, *args)`, kind "python" or "builtin"."""
    dist: Any = importlib.import_module("torch.distributed")
    if not hasattr(dist, "_register_comm_hook") or not hasattr(dist, "_register_builtin_comm_hook"):
        raise moved("torch.distributed._register_comm_hook")

    @contextlib.contextmanager
    def registration() -> Any:
        python, builtin = dist._register_comm_hook, dist._register_builtin_comm_hook
        dist._register_comm_hook = functools.partial(replacement, "python")
        dist._register_builtin_comm_hook = functools.partial(replacement, "builtin")
        try:
            yield
        finally:
            dist._register_comm_hook, dist._register_builtin_comm_hook = python, builtin

    return registration()


def skip_frames_recursively(fn: Any) -> None:
    """Dynamo never compiles `fn`'s frame nor any frame it calls (a wrapper that runs eagerly after a
    graph break, around torch's own function, which Dynamo skips there too). Private:
    torch._dynamo.eval_frame.set_code_exec_strategy with FrameExecStrategy(SKIP, SKIP) (2.6 .. 2.15); where
    it is missing, skip_frames_of (the frame alone)."""
    try:
        eval_frame = importlib.import_module("torch._dynamo.eval_frame")
        types_module = importlib.import_module("torch._dynamo.types")
        skip = types_module.FrameAction.SKIP
        strategy = types_module.FrameExecStrategy(skip, skip)
        eval_frame.set_code_exec_strategy(fn.__code__, strategy)
    except (ImportError, AttributeError, TypeError):
        skip_frames_of(fn)


def launcher_parser() -> Any:
    """torchrun's own argument parser (torch.distributed.run.get_args_parser, 1.10 .. 2.15), so that
    `dynascope run torchrun ARGS` reads the launcher's options exactly as torchrun does."""
    require_torch()
    try:
        run = importlib.import_module("torch.distributed.run")
        return run.get_args_parser()
    except (ImportError, AttributeError):
        raise moved("torch.distributed.run.get_args_parser") from None
