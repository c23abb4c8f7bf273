"""One concrete fix for a graph break or a recompile: what to change at the line it names.

Rules keyed on torch's reason (the wording of torch 2.5 to 2.15), most specific first; the code of the
line fills in names. Where no rule fits, torch's own hint (the "Hint:" lines torch 2.6+ gives with a
break) is the fix, else a general one. Plain text, no torch.
"""

from __future__ import annotations

import re

__all__ = ["break_fix", "ddp_split_fix", "fallback_fix", "recompile_fix"]

_CALLEE = re.compile(r"([A-Za-z_][\w.]*)\s*\(")
_NAME = re.compile(r"[A-Za-z_]\w*")


def _callee(code: str | None, skip: tuple[str, ...] = ()) -> str | None:
    """The first function called on a line of code (`x = helper(x)` -> helper)."""
    for name in _CALLEE.findall(code or ""):
        if name.split(".")[-1] not in skip:
            return name
    return None


def _hint(detail: str | None) -> str | None:
    """torch's first hint for a break, without its "Hint:" label."""
    for line in (detail or "").splitlines():
        text = line.strip()
        if text.startswith("Hint:"):
            return text[len("Hint:"):].strip() or None
    return None


def break_fix(reason: str | None, code: str | None, detail: str | None = None, where: str | None = None) -> str:
    """What to change at a graph break's line; `where`: the files the break is placed in (its line's, and the
    library line torch named), which tell DDP's own code where the reason does not (torch 2.5)."""
    why = (reason or "").lower()
    text = f"{why}\n{(detail or '').lower()}\n{(where or '').lower()}"
    callee = _callee(code)
    if _in_ddp(text):
        return DDP_OWN_CODE
    if "fell back to eager" in why and "loop" in why:
        return ("the break is inside a loop, where Dynamo cannot resume, so it runs the whole function eagerly: "
                "remove the break (see its own row), or move the loop body into a function of its own so that "
                "only that function splits")
    if "compiler.disable" in text or "disable()" in text:
        name = _callee(code) or "the function"
        return (f"{name} is marked torch.compiler.disable: remove the decorator so that Dynamo compiles it, or "
                "call it outside the compiled function")
    if "graph_break()" in text or ("explicit" in text and "graph break" in text):
        return "remove the torch._dynamo.graph_break() call"
    if re.search(r"\bprint\b", text) or re.match(r"\s*print\s*\(", code or ""):
        return ("remove the print, or let Dynamo print after the graph: "
                "torch._dynamo.config.reorderable_logging_functions.add(print)")
    if ".item()" in text or "capture_scalar_outputs" in text or "tensor.item" in text:
        return ("keep the value a tensor instead of calling .item(), or set "
                "torch._dynamo.config.capture_scalar_outputs = True so that Dynamo keeps it in the graph")
    if "tolist" in text:
        return "keep the values in a tensor instead of calling .tolist() inside the compiled function"
    if "data-dependent branching" in why or "generic_jump" in text:
        return ("the `if` depends on a tensor's value: compute both sides and pick with torch.where(...), use "
                "torch.cond(...), or move the test out of the compiled function")
    if "dynamic shape operator" in text or "capture_dynamic_output_shape_ops" in text:
        return ("the op's output shape depends on the data: set "
                "torch._dynamo.config.capture_dynamic_output_shape_ops = True, or move it out of the compiled function")
    if "numpy" in text:
        return "use torch operations instead of NumPy on this line (or a tensor's own methods)"
    if "marked as skipped" in text or "skip_files" in text or "skipfiles" in text:
        name = callee or "the function"
        return (f"Dynamo does not trace {name} (its module is on Dynamo's skip list): call it outside the compiled "
                "function, or use torch ops in its place")
    hint = _hint(detail)
    if hint:
        return hint
    return "rewrite this line with torch operations Dynamo can trace, or move it out of the compiled function"


def fallback_fix(reason: str | None, explained: bool = False, function: str | None = None) -> str:
    """What to change when Dynamo ran a whole function eagerly. `explained`: the run's explanation was
    read (it names no reason), so it is no use sending the user to run explain: say what it found.
    `function`: the function's name, where it says more than the reason (DDP's own forward)."""
    why = (reason or "").lower()
    if "distributeddataparallel" in (function or "").lower():
        return DDP_FORWARD
    if "recompile limit" in why or "cache size limit" in why or "cache_size_limit" in why:
        return ("it recompiled until the recompile limit: find the guard that keeps failing in the recompiles "
                "table and make that input stable, or dynamic (torch._dynamo.mark_dynamic)")
    if "loop" in why:
        return break_fix(reason, None)
    if "ran eagerly" in why:
        return ("Dynamo gave up on the whole function at this break, as it does for a break inside a loop (it "
                "cannot resume there): remove the break (see its own row), or move the loop body into a function "
                "of its own so that only that function splits")
    if "skipped" in why:
        return ("Dynamo skipped the whole function: a graph break inside one of its loops does this (Dynamo "
                "cannot resume inside a loop): move the loop body into a function of its own, or remove the break")
    if (not why or "did not compile" in why) and explained:
        return ("the explanation records no compile of it that gave up: Dynamo did not compile it at all "
                "(torch.compiler.disable, or a file Dynamo skips): compile the code it calls instead")
    if not why or "did not compile" in why:
        return "run `dynascope explain` (or `dynascope run`) on the script to see why Dynamo gave up on it"
    return "fix the break that made Dynamo give up on the function (its reason says which)"


def recompile_fix(reason: str | None, subject: str | None = None, expected: str | None = None,
                  explained: bool = False) -> str:
    """What to change so that a guard stops failing (the one wording: `dynascope run --no-recompiles` and
    the recompiles table both say it). `subject`: what the guard checks; `expected`: its value then;
    `explained`: the run's explanation was read, so the fix points into it instead of at explain."""
    why = (reason or "").lower()
    carried = (subject or "").startswith("___stack")  # Dynamo's name for a value handed to a resume function
    name = "the value carried over the graph break" if carried else subject or "the value"
    if "size mismatch" in why or "stride mismatch" in why or "dimensionality" in why:
        root = _NAME.match(subject or "")
        at = re.search(r"at index (\d+)", why)
        return (f"mark the dimension dynamic before the first call (torch._dynamo.mark_dynamic("
                f"{root.group(0) if root else 'x'}, {at.group(1) if at else 'dim'})), or compile with dynamic=True, "
                "so that one graph serves every size")  # fmt: skip
    if "dtype mismatch" in why:
        return f"give {name} the same dtype on every call (cast it once, outside the compiled function)"
    if "device mismatch" in why:
        return f"keep {name} on the same device on every call"
    if "requires_grad mismatch" in why:
        return f"call with {name} requiring grad (or not) consistently, e.g. detach it before the call"
    if "grad_mode" in why or "global state" in why:
        return ("the call switches between grad and no_grad (or another global setting): expected, one cache "
                "entry per setting")
    if expected is not None or re.search(r"==|!=", why):
        if carried:  # the function itself made it a Python number before the break
            return (f"{name} is a Python number that Dynamo specialises on, so each new value compiles anew: "
                    "keep it a tensor across the break (no .item() before it), or compile with dynamic=True")
        as_tensor = f"torch.tensor({name}), or " if _NAME.fullmatch(name) else ""
        return (f"{name} is a Python value that Dynamo specialises on, so each new value compiles anew: pass it "
                f"as a tensor ({as_tensor}the tensor itself where it came from .item()), make it a fixed attribute, "
                "or for a number compile with dynamic=True")  # fmt: skip
    if "id_match" in why or "___check_obj_id" in why or " id" in why or "type" in why:
        return f"the guard checks {name}'s identity or type: create it once instead of on every call"
    if explained:
        return ("make what the failing guard checks the same on every call (every guard of this function, and "
                "the line that installed it, is in explanation.json and the .py beside it)")
    return "run `dynascope explain` on the script to see every guard of this function"


# torch.compile(DDP(model)): Dynamo traces DistributedDataParallel.forward only up to DDP's own Python (its
# logger, its _inside_ddp_forward context: Dynamo's skip list) and compiles the wrapped module's forward as a
# frame of its own, split at DDP's buckets (DDPOptimizer)
_DDP_MARKS = ("distributeddataparallel", "_inside_ddp_forward", "set_runtime_stats_and_log",
              "nn/parallel/distributed.py")
DDP_OWN_CODE = (
    "the break is in DistributedDataParallel's own code (torch.compile(DDP(model)): Dynamo does not trace DDP's "
    "logger and forward context, which are on its skip list), not in yours; Dynamo compiles your module's forward "
    "inside it as a frame of its own. To compile only your model, with no breaks in DDP's code: "
    "DDP(torch.compile(model))"
)
DDP_FORWARD = (
    "DistributedDataParallel.forward is torch's own Python (its hooks prepare the gradient buckets); Dynamo does not "
    "compile it (it stops at DDP's logger and forward context, on its skip list) and compiles your module's "
    "forward inside it instead, split at DDP's buckets. It runs as Python with or without torch.compile, so there "
    "is nothing to gain here: DDP(torch.compile(model)) compiles the same graphs without these breaks"
)


def _in_ddp(text: str) -> bool:
    return any(mark in text for mark in _DDP_MARKS)


def ddp_split_fix(cap_mb: float | None, graphs: int) -> str:
    """What to change about a graph DDPOptimizer split at DDP's buckets (one graph per bucket)."""
    now = f"{cap_mb:g}" if cap_mb is not None else "the current cap"
    return (f"expected with DDP: one graph per gradient bucket, so that each bucket's all-reduce starts while "
            f"backward goes on. Fewer graphs: raise DDP(model, bucket_cap_mb=...) above {now} ({graphs} buckets now); "
            "one graph: torch._dynamo.config.optimize_ddp = False (then no all-reduce overlaps backward), or "
            "optimize_ddp = \"python_reducer\" with compiled autograd (torch._dynamo.config.compiled_autograd = "
            "True), which traces the all-reduces into the compiled backward (experimental)")
