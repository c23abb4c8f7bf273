"""Trace configuration from arguments and the environment.

Both pydftracer's `DFTRACER_*` variables and our `DYNASCOPE_*` equivalents are read; when both are
set, the `DYNASCOPE_` one wins. Bad values raise ConfigError naming the variable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

from dynascope.errors import ConfigError

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env(name: str) -> str | None:
    """The value of DYNASCOPE_<name>, else DFTRACER_<name>, else None."""
    for prefix in ("DYNASCOPE_", "DFTRACER_"):
        value = os.environ.get(prefix + name)
        if value is not None:
            return value
    return None


def env_flag(name: str, default: bool) -> bool:
    value = env(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigError(f"DFTRACER_{name}/DYNASCOPE_{name}={value!r} is not a switch: use 1 or 0")


def env_int(name: str, default: int) -> int:
    value = env(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"DYNASCOPE_{name}={value!r} is not a whole number") from None


@dataclass(frozen=True)
class TraceConfig:
    compression: bool = True  # write .pfw.gz (multi-member gzip)
    compression_level: int = 2  # ISA-L level 2: fast and as dense as zlib -6 on traces
    inline_args: bool = False  # attribution in every event instead of OH records
    record_shapes: bool = False  # DFTRACER_INC_METADATA: input shapes/dtypes per op
    flush_interval_s: float = 0.5  # a SIGKILL loses at most this much
    disable_io: bool = False  # no Python file I/O events (fileio.py): DFTRACER_DISABLE_IO, as pydftracer
    step_events: bool = True  # data loading, backward, optimizer, torch.save/load (capture/training.py)
    frame_events: bool = True  # compiled frames' starts and returns, compiled calls (capture/frames.py)
    device_time: bool = True  # what ran on the GPU, joined to the ops that launched it (capture/device.py)
    memory: bool = True  # memory in use, sampled by a thread off the hot path (trace/memory.py)
    memory_interval_us: int = 1000  # how often the sampler reads
    memory_step_kb: int = 256  # a sample is kept when memory moved by this much since the last one kept

    @classmethod
    def from_env(cls, **overrides: Any) -> TraceConfig:
        config = cls(
            compression=env_flag("TRACE_COMPRESSION", True),
            compression_level=env_int("COMPRESSION_LEVEL", 2),
            inline_args=env_flag("INLINE_ARGS", False),
            record_shapes=env_flag("INC_METADATA", False),
            flush_interval_s=env_int("FLUSH_INTERVAL_MS", 500) / 1000.0,
            disable_io=env_flag("DISABLE_IO", False),
            step_events=env_flag("STEP_EVENTS", True),
            frame_events=env_flag("FRAME_EVENTS", True),
            device_time=env_flag("DEVICE_TIME", True),
            memory=env_flag("MEMORY", True),
            memory_interval_us=env_int("MEMORY_INTERVAL_US", 1000),
            memory_step_kb=env_int("MEMORY_STEP_KB", 256),
        )
        overrides = {k: v for k, v in overrides.items() if v is not None}
        config = replace(config, **overrides)
        if not 0 <= config.compression_level <= 9:
            raise ConfigError(f"compression level {config.compression_level} is outside 0..9")
        if config.memory_interval_us < 100:
            raise ConfigError(f"DYNASCOPE_MEMORY_INTERVAL_US={config.memory_interval_us} is below 100 (µs): "
                              "sampling that often costs a core")
        if config.flush_interval_s <= 0:
            raise ConfigError("the flush interval must be positive (DYNASCOPE_FLUSH_INTERVAL_MS)")
        return config


def tracing_enabled(default: bool) -> bool:
    """Whether tracing is on: DYNASCOPE_ENABLE / DFTRACER_ENABLE, else `default`."""
    return env_flag("ENABLE", default)
