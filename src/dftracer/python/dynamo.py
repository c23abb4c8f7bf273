"""pydftracer's Dynamo integration (`dftracer.python.dynamo`) on dynascope's tracing backend.

    from dftracer.python.dynamo import create_backend
    compiled = torch.compile(model, backend=create_backend(name="resnet50", epoch=1, step=100))

Tracing happens only with DFTRACER_ENABLE=1; otherwise every entry point compiles the plain graph.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dftracer.python.logger import dft_fn, enabled
from dynascope.capture.backend import TracingBackend
from dynascope.errors import ConfigError

__all__ = ["Dynamo", "compile", "create_backend", "dft_fn", "dftracer_dynamo_backend"]


def create_backend(name: str | None = None, epoch: int | None = None, step: int | None = None,
                   image_idx: int | None = None, image_size: Any = None, enable: bool = True,
                   autograd: bool = True, inner: str | None = None) -> TracingBackend:  # fmt: skip
    """A torch.compile backend tracing every graph op (AOT forward/backward with autograd=True), or with
    inner="inductor" every kernel call of inductor's generated code, forward and backward."""
    if not isinstance(enable, bool):
        raise ConfigError(f"create_backend(enable={enable!r}): enable must be True or False")
    return TracingBackend(name, epoch, step, image_idx, image_size, enable=enable and enabled(), autograd=autograd,
                          inner=inner)  # fmt: skip


class Dynamo:
    """A configured tracer whose `.compile` decorates functions and forward methods."""

    def __init__(self, name: str | None = None, epoch: int | None = None, step: int | None = None,
                 image_idx: int | None = None, image_size: Any = None, enable: bool = True,
                 inner: str | None = None) -> None:  # fmt: skip
        self.name, self.epoch, self.step = name, epoch, step
        self.image_idx, self.image_size, self.enable, self.inner = image_idx, image_size, enable, inner
        create_backend(name, epoch, step, image_idx, image_size, enable, inner=inner)  # validate now, not at first call

    def backend(self, autograd: bool = True, inner: str | None = None) -> TracingBackend:
        return create_backend(self.name, self.epoch, self.step, self.image_idx, self.image_size, self.enable, autograd,
                              inner or self.inner)  # fmt: skip

    def compile(self, f_py: Callable | None = None, autograd: bool = True, inner: str | None = None) -> Any:
        """`@tracer.compile`, `@tracer.compile(autograd=False)` or `@tracer.compile(inner="inductor")`:
        torch.compile with this tracer (inner="inductor" traces inductor's kernels)."""

        def decorate(fn: Callable) -> Any:
            import torch

            return torch.compile(fn, backend=self.backend(autograd, inner))

        return decorate(f_py) if callable(f_py) else decorate


_default: Dynamo | None = None


def compile(f_py: Callable | None = None, autograd: bool = True, inner: str | None = None) -> Any:
    """`@dynamo.compile`: compile a function or forward method with the default tracer;
    `@dynamo.compile(inner="inductor")` compiles it with inductor and traces its kernels."""
    global _default
    if _default is None:
        _default = Dynamo(name="dynamo")
    return _default.compile(f_py, autograd, inner)


_default_backend: TracingBackend | None = None


def dftracer_dynamo_backend(gm: Any, example_inputs: list, **kwargs: Any) -> Any:
    """`torch.compile(model, backend=dftracer_dynamo_backend)`: trace with default settings."""
    global _default_backend
    if _default_backend is None:
        _default_backend = create_backend()
    return _default_backend(gm, example_inputs, **kwargs)
