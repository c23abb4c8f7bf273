"""The stages a compiled program is bisected over: which backend each is, and what a failure there
points to in torch's stack."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dynascope.errors import ConfigError


@dataclass(frozen=True)
class Stage:
    name: str  # "eager", "aot_eager", ... or a custom backend's name ("module:attr", its __name__)
    backend: Any  # what torch.compile gets: a registered backend name or a callable
    layer: str  # the part of torch's stack that a first failure here points to
    next_step: str  # what to try when this is the first bad stage


BUILTIN = (
    Stage("eager", "eager", "Dynamo's graph capture (bytecode tracing and guards; the graphs run eagerly)",
          "Dynamo changes or cannot trace the code at the reported line: run `dynascope explain` on the "
          "script to see its graph breaks and guards, wrap that function in `torch.compiler.disable` to "
          "work around it, and report it to PyTorch with the repro."),
    Stage("aot_eager", "aot_eager", "AOTAutograd (functionalization, the joint forward-backward graph)",
          "AOTAutograd changes the result of the reported op: look for in-place updates or mutated views "
          "at that line, rewrite it out of place or wrap the function in `torch.compiler.disable`, and "
          "report it to PyTorch with the repro."),
    Stage("aot_eager_decomp_partition", "aot_eager_decomp_partition",
          "ATen decompositions and the min-cut partitioner that inductor uses",
          "A decomposition (or the partitioner's recomputation) of the reported op is wrong: the repro runs "
          "it without inductor's code generation; compile with backend='aot_eager' until it is fixed, "
          "and report it to PyTorch with the repro."),
    Stage("inductor", "inductor", "inductor's lowering and code generation (the kernels it generates)",
          "inductor generates wrong code for the reported op: try the config switch named below (if one "
          "was found), or `torch.compiler.disable` on the function at that line, and report it to "
          "PyTorch with the repro."),
)  # fmt: skip
BUILTIN_NAMES = tuple(stage.name for stage in BUILTIN)


def resolve(spec: Any) -> Stage:
    """A stage from a backend name, a `module:attr` path to a backend callable, or a callable."""
    for stage in BUILTIN:
        if spec == stage.name:
            return stage
    if isinstance(spec, str):
        backend = _import(spec) if ":" in spec else _registered(spec)
        name = spec
    elif callable(spec):
        backend = spec
        found = importable(spec)
        name = found[1] if found else str(getattr(spec, "compiler_name", None) or getattr(spec, "__name__", "backend"))
    else:
        raise ConfigError(f"backend {spec!r}: give a backend name, a module:attr path or a callable")
    return Stage(name, backend, f"the backend {name!r} (its own transformation or code generation)",
                 f"the backend {name!r} changes the result of the reported op: the repro runs that graph "
                 "under it; fix the backend or leave that op to eager.")  # fmt: skip


def importable(obj: Any) -> tuple[str, str] | None:
    """(module, name) under which `obj` can be imported in a fresh process, or None: the module it was
    defined in, else any imported module that binds it at top level (a backend made by a factory, such
    as `aot_autograd(...)`, is defined inside torch but bound in the user's module)."""
    import sys

    home = getattr(obj, "__module__", None)
    candidates = [home] if home in sys.modules else []
    candidates += [name for name in list(sys.modules) if name != home and not name.startswith(("torch", "_"))]
    for module_name in candidates:
        if module_name == "__main__":
            continue
        namespace = getattr(sys.modules.get(module_name), "__dict__", None) or {}
        for name, value in list(namespace.items()):
            if value is obj and not name.startswith("_"):
                return module_name, name
    return None


def stages(extra: list[Any], builtin: list[str] | None = None) -> list[Stage]:
    """The built-in stages (those named in `builtin`, default all), then each extra backend once, in
    the order given."""
    unknown = sorted(set(builtin or ()) - set(BUILTIN_NAMES))
    if unknown:
        raise ConfigError(f"no built-in stage {', '.join(unknown)}; the stages are {', '.join(BUILTIN_NAMES)}")
    out = [stage for stage in BUILTIN if builtin is None or stage.name in builtin]
    for spec in extra:
        stage = resolve(spec)
        if stage.name not in {s.name for s in out}:
            out.append(stage)
    return out


def _import(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"backend {spec}: cannot import {module_name} ({exc}); check the path and PYTHONPATH"
        ) from None
    try:
        backend = getattr(module, attr)
    except AttributeError:
        raise ConfigError(f"backend {spec}: {module_name} has no attribute {attr!r}") from None
    if not callable(backend):
        raise ConfigError(f"backend {spec}: {attr} is not callable; give a backend function (gm, example_inputs)")
    return backend


def _registered(name: str) -> str:
    from dynascope import _torch

    try:
        _torch.lookup_backend(name)
    except Exception:  # noqa: BLE001 - torch raises its own InvalidBackend; the message below is ours
        raise ConfigError(f"backend {name!r} is not registered with torch; give a registered name "
                          "(see torch._dynamo.list_backends()) or module:attr") from None  # fmt: skip
    return name


def compiler(stage: Stage) -> Any:
    """The stage's backend as a callable (gm, example_inputs) -> compiled."""
    from dynascope import _torch

    return _torch.lookup_backend(stage.backend) if isinstance(stage.backend, str) else stage.backend


@contextlib.contextmanager
def controlled_randomness(seed: int = 0) -> Iterator[None]:
    """Every stage runs alike: random ops draw the same numbers (seeded, and inductor uses eager's
    generator, `fallback_random`, so that dropout masks agree with eager), and inductor and AOTAutograd
    compile afresh instead of loading an earlier compile from their caches."""
    import random

    import torch

    from dynascope import _torch

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:  # pragma: no cover - numpy comes with polars' dependencies here
        pass
    with _torch.inductor_config_patch(fallback_random=True, fx_graph_cache=False), _torch.without_autograd_cache():
        yield
