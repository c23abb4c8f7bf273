"""The torch-side events a trace session installs (registered with trace/installers.py by the package's
__init__): the whole training step's automatic events, frame probes for graph-break costs, GPU activity
and collectives. Each module is imported when a session first asks, never at `import dynascope`."""

from __future__ import annotations

from typing import Any

from dynascope.trace.installers import Installer


def _training(session: Any) -> None:
    from dynascope.capture import training

    training.install(io=not session.config.disable_io)


def _training_off() -> None:
    from dynascope.capture import training

    training.uninstall()


def _frames(session: Any) -> None:
    from dynascope.capture import frames

    frames.install()


def _frames_off() -> None:
    from dynascope.capture import frames

    frames.uninstall()


def _device(session: Any) -> None:
    from dynascope.capture import device

    device.install(session=session)


def _device_off() -> None:
    from dynascope.capture import device

    device.uninstall()


def _collectives(session: Any) -> None:
    from dynascope.capture import collectives

    collectives.install()


def _collectives_off() -> None:
    from dynascope.capture import collectives

    collectives.uninstall()


INSTALLERS = [
    Installer("automatic step events", lambda config: config.step_events, _training, _training_off),
    Installer("frame events (graph-break costs)", lambda config: config.frame_events, _frames, _frames_off),
    Installer("device times (GPU)", lambda config: config.device_time, _device, _device_off),
    Installer(
        "collective events (torch.distributed)", lambda config: config.step_events, _collectives, _collectives_off
    ),
]


def torch_side_installers() -> list[Installer]:
    return INSTALLERS
