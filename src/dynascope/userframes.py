"""Which frames of a stack are the user's: the line a graph break or a recompile is charged to.

A stack that leads from the user's code into a library (torch.nn's modules, an installed package, the
standard library) is charged to its first user frame: the innermost frame that is none of those. The
library line stays beside it as a detail. Plain Python, no torch: capture, explain and analyze all use it.
"""

from __future__ import annotations

import os
import sysconfig
from collections.abc import Sequence

__all__ = ["first_user_frame", "is_library_file", "library_text"]

_PACKAGE_DIRS = ("site-packages", "dist-packages")
_OWN = os.path.dirname(os.path.realpath(__file__)) + os.sep  # dynascope's own code (its call wrappers) is a library's
_DEMO = os.path.join(_OWN, "demo") + os.sep  # but its built-in demo stands for the user's script


def _stdlib_dirs() -> tuple[str, ...]:
    dirs = set()
    for key in ("stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            dirs.add(os.path.realpath(path) + os.sep)
    return tuple(sorted(dirs))


_STDLIB = _stdlib_dirs()


def is_library_file(path: str | None) -> bool:
    """Whether `path` is not the user's: a file of an installed package (site-packages, dist-packages), of
    the standard library, a path torch gave relative to its own directory ("nn/modules/conv.py"), or no
    file at all ("<string>", "<frozen ...>")."""
    if not path:
        return True
    if path.startswith("<"):
        return True
    if not os.path.isabs(path):
        return True  # torch names its own files relative to its package
    real = os.path.realpath(path)
    if real.startswith(_OWN):
        return not real.startswith(_DEMO)  # the built-in demo is the user's, wherever dynascope is installed
    parts = path.replace("\\", "/").split("/")
    if any(p in _PACKAGE_DIRS for p in parts):
        return True
    return any(real.startswith(d) for d in _STDLIB)


def first_user_frame(files: Sequence[str | None]) -> int | None:
    """The index of the first user frame of a stack given outermost first (its files): the innermost one
    that is not a library's. None where every frame is a library's."""
    for i in range(len(files) - 1, -1, -1):
        if not is_library_file(files[i]):
            return i
    return None


def library_text(path: str | None, line: int | None) -> str | None:
    """A library line as the tables name it: "torch/nn/modules/conv.py:560", ".../transformers/x.py:12"."""
    if not path:
        return None
    norm = path.replace("\\", "/")
    if not os.path.isabs(path) and not path.startswith("<"):
        norm = "torch/" + norm  # torch shortens its own paths
    else:
        parts = norm.split("/")
        for marker in _PACKAGE_DIRS:
            if marker in parts:
                norm = "/".join(parts[parts.index(marker) + 1:])
                break
        else:
            for d in _STDLIB:
                if os.path.realpath(path).startswith(d):
                    norm = os.path.relpath(os.path.realpath(path), d).replace("\\", "/")
                    break
    return f"{norm}:{line}" if line else norm
