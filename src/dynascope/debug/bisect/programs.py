"""The programs a bisect runs again and again, once per stage: a Python callable, or a user's script.

Each `run(stage)` starts from the same state (parameters, optimizer state and random generators are
restored or reseeded), runs the program with every compile going to `stage` (None: no compile at
all), and returns the values it is judged by: outputs and gradients.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import time
import warnings
from collections.abc import Iterator
from typing import Any

from dynascope import _torch
from dynascope.debug.bisect.compare import flatten
from dynascope.debug.bisect.record import Recorder, RunRecord
from dynascope.debug.bisect.stages import BUILTIN_NAMES, Stage, controlled_randomness


def _backward_for(values: Any, seed: int) -> bool:
    """Backpropagate seeded random cotangents from the float outputs that require grad; False if none."""
    import torch

    outs = [v for _, v in flatten(values) if isinstance(v, torch.Tensor) and v.requires_grad and v.is_floating_point()]
    if not outs:
        return False
    generator = torch.Generator().manual_seed(seed + 1)
    cotangents = [torch.randn(o.shape, generator=generator, dtype=torch.float32).to(o.dtype) for o in outs]
    torch.autograd.backward(outs, cotangents)
    return True


def _detach(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_detach(v) for v in value)
    if isinstance(value, dict):
        return {k: _detach(v) for k, v in value.items()}
    return value


class CallProgram:
    """`dynascope.bisect(fn, *args, **kwargs)`: a module, a function, or a zero-argument step function.

    State restored before each run: the module's (or, for a function, the modules and optimizers it
    refers to through its closure and globals) parameters, buffers and optimizer state; tensor
    arguments are fresh copies. Judged by: the return value, and the gradients of those parameters
    (and of tensor arguments that require grad), from the function's own `backward()` or, when it
    calls none, from seeded random cotangents of its outputs.
    """

    def __init__(self, fn: Any, args: tuple, kwargs: dict, seed: int = 0):
        import torch

        self.fn, self.args, self.kwargs, self.seed = fn, args, kwargs, seed
        self.modules: dict[str, Any] = {"": fn} if isinstance(fn, torch.nn.Module) else _referenced(fn, torch.nn.Module)
        self.optimizers: dict[str, Any] = _referenced(fn, torch.optim.Optimizer)
        self._states = {name: copy.deepcopy(m.state_dict()) for name, m in self.modules.items()}
        self._optimizer_states = {name: copy.deepcopy(o.state_dict()) for name, o in self.optimizers.items()}
        self.requested: list[Any] = []  # backends the program asks for itself: none, it is compiled here

    def _restore(self) -> None:
        for name, module in self.modules.items():
            module.load_state_dict(copy.deepcopy(self._states[name]))
            for p in module.parameters():
                p.grad = None
        for name, optimizer in self.optimizers.items():
            optimizer.load_state_dict(copy.deepcopy(self._optimizer_states[name]))

    def _fresh_args(self) -> tuple:
        import torch

        def fresh(v: Any) -> Any:
            if isinstance(v, torch.Tensor):
                c = v.detach().clone()
                return c.requires_grad_(v.requires_grad) if c.is_floating_point() else c
            return v

        return tuple(fresh(a) for a in self.args)

    def run(self, stage: Stage | None) -> RunRecord:
        import torch

        self._restore()
        args = self._fresh_args()
        recorder = Recorder(stage) if stage is not None else None
        record = RunRecord()
        started = time.perf_counter()
        try:
            with controlled_randomness(self.seed):
                if recorder is None:
                    with _torch.force_eager():
                        out = self.fn(*args, **self.kwargs)
                else:
                    _torch.dynamo_reset()
                    out = torch.compile(self.fn, backend=recorder)(*args, **self.kwargs)
                grads = self._grads(args)
                if not grads and _backward_for(out, self.seed):
                    grads = self._grads(args)
            record.values = {"output": _detach(out), "grad": grads}
        except Exception as exc:  # noqa: BLE001 - the failure is what is being judged
            record.error = exc
        record.seconds = time.perf_counter() - started
        record.graphs = recorder.graphs if recorder is not None else []
        return record

    def _grads(self, args: tuple) -> dict[str, Any]:
        import torch

        grads = {}
        for name, module in self.modules.items():
            for pname, p in module.named_parameters():
                if p.grad is not None:
                    grads[f"{name}.{pname}" if name else pname] = p.grad.detach().clone()
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor) and a.grad is not None:
                grads[f"arg{i}"] = a.grad.detach().clone()
        return grads


def _referenced(fn: Any, kind: type) -> dict[str, Any]:
    """Objects of `kind` a function reaches directly: `self` of a bound method, closure cells, and the
    globals its code names."""
    found: dict[str, Any] = {}
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, kind):
        found["self"] = owner
    function = getattr(fn, "__func__", fn)
    code = getattr(function, "__code__", None)
    if code is None:
        return found
    for name, cell in zip(code.co_freevars, function.__closure__ or (), strict=False):
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if isinstance(value, kind):
            found[name] = value
    namespace = getattr(function, "__globals__", {})
    for name in code.co_names:
        value = namespace.get(name)
        if isinstance(value, kind):
            found.setdefault(name, value)
    return found


class ScriptProgram:
    """`dynascope bisect SCRIPT args`: the script run as `__main__`, every `torch.compile` in it sent to
    the stage (None: torch.compile returns what it was given). Judged by the outputs of the first
    `calls` calls of each compiled object and the first gradient of each parameter of compiled modules.
    The backends the script asks for that are not built in are bisected too (`requested`)."""

    def __init__(self, path: str, argv: list[str], calls: int = 2, seed: int = 0):
        self.path, self.argv, self.calls, self.seed = path, argv, calls, seed
        self.requested: list[Any] = []

    def run(self, stage: Stage | None) -> RunRecord:
        import torch

        from dynascope.scriptrun import run_script

        recorder = Recorder(stage) if stage is not None else None
        record = RunRecord()
        original = torch.compile
        hooks: list[Any] = []
        counter = [0]

        def watch(compiled: Any, label: str) -> Any:
            calls = [0]

            def keep(output: Any) -> None:
                if calls[0] < self.calls:
                    record.values[f"{label} call {calls[0]}"] = _detach(output)
                calls[0] += 1

            if isinstance(compiled, torch.nn.Module):
                hooks.append(compiled.register_forward_hook(lambda _m, _a, output: keep(output)))
                for pname, p in compiled.named_parameters():
                    if p.requires_grad:  # a compiled module names them _orig_mod.<name>: keep <name>
                        key = f"{label} grad {pname.removeprefix('_orig_mod.')}"
                        hooks.append(p.register_post_accumulate_grad_hook(_first_grad(record.values, key)))
                return compiled

            @functools.wraps(compiled)
            def watched(*args: Any, **kwargs: Any) -> Any:
                output = compiled(*args, **kwargs)
                keep(output)
                return output

            return watched

        def compile_to_stage(model: Any = None, **options: Any) -> Any:
            if model is None:  # @torch.compile(...) used as a decorator factory
                return lambda m: compile_to_stage(m, **options)
            asked = options.get("backend", "inductor")
            if not (isinstance(asked, str) and asked in BUILTIN_NAMES) and all(asked is not r for r in self.requested):
                self.requested.append(asked)
            counter[0] += 1
            label = f"compiled #{counter[0]} ({_label(model)})"
            if recorder is None:
                return watch(model, label)
            kept = {k: v for k, v in options.items() if k in ("fullgraph", "dynamic")}
            return watch(original(model, backend=recorder, **kept), label)

        torch.compile = compile_to_stage
        started = time.perf_counter()
        try:
            if recorder is not None:
                _torch.dynamo_reset()
            with controlled_randomness(self.seed), _quiet() as output:
                record.error = run_script(self.path, self.argv)
            record.output = output.getvalue()
        finally:
            torch.compile = original
            for hook in hooks:
                hook.remove()
        record.seconds = time.perf_counter() - started
        record.graphs = recorder.graphs if recorder is not None else []
        return record


@contextlib.contextmanager
def _quiet() -> Iterator[io.StringIO]:
    """The script's own printing and warnings, kept instead of shown (it runs once per stage)."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield buffer


def _first_grad(values: dict, key: str) -> Any:
    def hook(p: Any) -> None:
        if key not in values and p.grad is not None:
            values[key] = p.grad.detach().clone()

    return hook


def _label(model: Any) -> str:
    return (
        type(model).__name__
        if not callable(model) or hasattr(model, "parameters")
        else getattr(model, "__name__", "fn")
    )
