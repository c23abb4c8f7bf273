"""The torch-side events a trace session installs (registered with trace/installers.py by the package's
__init__): the whole training step's automatic events, frame probes for graph-break costs, GPU activity,
the GPU's memory and collectives. Each module is imported when a session first asks, never at `import dynascope`."""

from __future__ import annotations

from typing import Any

from dynascope.trace.installers import Installer


def _training() -> Any:
    from dynascope.capture import training

    return training


def _frames() -> Any:
    from dynascope.capture import frames

    return frames


def _device() -> Any:
    from dynascope.capture import device

    return device


def _memory() -> Any:
    from dynascope.capture import memory

    return memory


def _collectives() -> Any:
    from dynascope.capture import collectives

    return collectives


INSTALLERS = [
    Installer("automatic step events", lambda config: config.step_events,
              lambda session: _training().install(io=not session.config.disable_io), lambda: _training().uninstall()),
    Installer("frame events (graph-break costs)", lambda config: config.frame_events,
              lambda session: _frames().install(), lambda: _frames().uninstall()),
    Installer("device times (GPU)", lambda config: config.device_time,
              lambda session: _device().install(session=session), lambda: _device().uninstall()),
    Installer("the GPU's memory on the memory track", lambda config: config.memory,
              lambda session: _memory().install(), lambda: _memory().uninstall()),
    Installer("collective events (torch.distributed)", lambda config: config.step_events,
              lambda session: _collectives().install(), lambda: _collectives().uninstall()),
]  # fmt: skip


def torch_side_installers() -> list[Installer]:
    return INSTALLERS
