"""When inductor is the first bad stage: which of its subsystems (a pass, a config default, the lowering
of one op) makes the difference, found with torch's own CompilerBisector on the shrunk graph."""

from __future__ import annotations

import contextlib
import gc
import io
from collections.abc import Callable
from typing import Any

from dynascope import _torch
from dynascope.debug.bisect.stages import Stage


def inductor_subsystem(gm: Any, inputs: list, fails: Callable[[Any, list, Stage], bool]) -> str | None:
    """The inductor subsystem whose switching off makes `gm` agree with eager, as one line, or None
    (torch without a CompilerBisector, or no single subsystem responsible)."""
    bisector = _torch.compiler_bisector()
    if bisector is None:
        return None

    def good() -> bool:
        name = bisector.get_backend() or "inductor"
        return not fails(gm, inputs, Stage(name, name, "", ""))

    with contextlib.redirect_stdout(io.StringIO()):  # it prints its progress, and its clean-up
        try:
            found = bisector.do_bisect(good)
        except Exception:  # noqa: BLE001 - narrowing is a bonus: the op and the repro stand without it
            found = None
        gc.collect()  # its clean-up runs when its frame is freed (tracebacks of failed runs hold it)
    if found is None or found.backend != "inductor" or not found.subsystem:
        return None
    text = str(found.subsystem)
    if found.bisect_number:
        text += f" (its application number {found.bisect_number}"
        text += f": {found.debug_info})" if found.debug_info else ")"
    return text
