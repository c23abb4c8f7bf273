"""What a trace session installs on the torch side, registered from above: trace/ never imports capture/
(it stays torch-free), so capture's installers reach it through this registry. The package's
__init__ registers capture/installers.py's table; a session asks for it only where torch is imported."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple


class Installer(NamedTuple):
    """One kind of torch-side events: on for a config, installed for a session, removed at its end."""

    what: str  # said when it cannot be installed: "no <what> (...)"
    enabled: Callable[[Any], bool]  # config -> on?
    install: Callable[[Any], None]  # session -> None
    uninstall: Callable[[], None]


_providers: list[Callable[[], list[Installer]]] = []


def register(provider: Callable[[], list[Installer]]) -> None:
    """`provider()` gives installers; called at each session's open and close where torch is imported."""
    if provider not in _providers:
        _providers.append(provider)


def installers() -> list[Installer]:
    return [i for provider in _providers for i in provider()]
