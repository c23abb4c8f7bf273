"""pydftracer's logger (`dftracer`) and region helper (`dft_fn`) mapped onto dynascope sessions and regions."""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Iterable
from typing import Any

from dynascope.trace import session as _session
from dynascope.trace.config import TraceConfig, tracing_enabled
from dynascope.trace.regions import complete_event, function_name, region

_LABELS = ("epoch", "step", "image_idx", "image_size")


def enabled() -> bool:
    """pydftracer traces only when DFTRACER_ENABLE=1."""
    return tracing_enabled(False)


class dftracer:
    """The process's logger. `dftracer.initialize_log(logfile, data_dir, process_id)` starts it."""

    _instance: dftracer | None = None

    def __init__(self, session: _session.TraceSession | None) -> None:
        self.session = session

    @classmethod
    def initialize_log(cls, logfile: str | None = None, data_dir: str | None = None, process_id: int = -1) -> dftracer:
        session = None
        if enabled():
            active = _session.current_session()
            if active is not None and not active.closed and not active.implicit:
                session = active  # pydftracer's logger is a process-wide singleton
            else:
                session = _session.TraceSession(logfile, config=TraceConfig.from_env(), data_dir=data_dir,
                                                extension_decides=False).open()  # fmt: skip
        cls._instance = cls(session)
        return cls._instance

    @classmethod
    def get_instance(cls) -> dftracer:
        if cls._instance is None:
            cls._instance = cls(_session.current_session())
        return cls._instance

    def finalize(self) -> None:
        if self.session is not None:
            self.session.finalize()

    @property
    def logfile(self) -> str | None:
        return self.session.path if self.session else None

    def get_time(self) -> int:
        """Now, in DFTracer's unit (epoch microseconds)."""
        return time.time_ns() // 1000

    def log_event(self, name: str, cat: str, start_time: int, duration: int,
                  int_args: dict | None = None, string_args: dict | None = None,
                  float_args: dict | None = None) -> None:  # fmt: skip
        if self.session is None:
            return
        args = {**(int_args or {}), **(float_args or {}), **(string_args or {})}
        complete_event(name, cat, start_time, duration, args)

    def log_metadata_event(self, key: str, value: Any) -> None:
        if self.session is not None:
            complete_event("metadata", "dftracer", self.get_time(), 0, {str(key): value})

    def enter_event(self) -> None:  # pydftracer's nesting bookkeeping; dynascope nests by itself
        pass

    def exit_event(self) -> None:
        pass


def _labels_from_call(fn: Callable, args: tuple, kwargs: dict) -> dict:
    """epoch/step/image_idx/image_size found among a call's arguments, defaults, or self's attributes."""
    try:
        bound = inspect.signature(fn).bind_partial(*args, **kwargs)
    except (TypeError, ValueError):
        return {}
    bound.apply_defaults()
    found = {k: bound.arguments[k] for k in _LABELS if k in bound.arguments}
    owner = bound.arguments.get("self")
    for key in _LABELS:
        if key not in found and owner is not None and hasattr(owner, key):
            found[key] = getattr(owner, key)
    return {k: v for k, v in found.items() if isinstance(v, (int, float, str, tuple, list))}


class dft_fn:
    """A region helper in pydftracer's shape: decorator (`.log`), context manager, iterator wrapper."""

    def __init__(self, cat: str, name: str | None = None, epoch: int | None = None, step: int | None = None,
                 image_idx: int | None = None, image_size: Any = None, enable: bool = True) -> None:  # fmt: skip
        self.cat = cat
        self.name = name
        self.enable = enable
        self.args: dict = {
            k: v for k, v in zip(_LABELS, (epoch, step, image_idx, image_size), strict=True) if v is not None
        }
        self._open: list[region] = []

    def update(self, epoch: int | None = None, step: int | None = None, image_idx: int | None = None,
               image_size: Any = None, args: dict | None = None) -> dft_fn:  # fmt: skip
        for key, value in zip(_LABELS, (epoch, step, image_idx, image_size), strict=True):
            if value is not None:
                self.args[key] = value
        self.args.update(args or {})
        return self

    def log_metadata(self, key: str, value: Any) -> None:
        self.args[str(key)] = value

    def flush(self) -> None:
        active = _session.current_session()
        if active is not None:
            active.flush()

    def reset(self) -> None:
        self.args.clear()

    # -- context manager ------------------------------------------------------------------------

    def __enter__(self) -> dft_fn:
        span = region(self.name or self.cat, self.cat, **self.args)
        self._open.append(span)
        if self.enable:
            span.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        span = self._open.pop()
        if self.enable:
            span.__exit__(*exc)

    # -- decorators -----------------------------------------------------------------------------

    def log(self, func: Callable | None = None, name: str | None = None) -> Any:
        def decorate(fn: Callable) -> Callable:
            event_name = name or self.name or function_name(fn)

            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                if not self.enable:
                    return fn(*args, **kwargs)
                with region(event_name, self.cat, **self.args, **_labels_from_call(fn, args, kwargs)):
                    return fn(*args, **kwargs)

            return wrapper

        return decorate(func) if callable(func) else decorate

    log_init = log
    log_static = log

    def iter(self, iterable: Iterable, name: str | None = None, iter_name: str = "step") -> Iterable:
        """Yield from `iterable`, recording `<name>.iter` for the time each item took to produce."""
        label = name or self.name or self.cat
        iterator = iter(iterable)
        index = 0
        while True:
            started = time.time_ns() // 1000
            try:
                item = next(iterator)
            except StopIteration:
                return
            if self.enable:
                complete_event(f"{label}.iter", self.cat, started, time.time_ns() // 1000 - started,
                               {**self.args, iter_name: index})  # fmt: skip
            index += 1
            yield item
