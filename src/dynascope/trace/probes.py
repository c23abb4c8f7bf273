"""Probes: a clock reading marked with a probe id, recorded without a Python call of ours.

A probe is what code that must stay cheap runs to say "this point was reached now": the code Dynamo
generates for a compiled frame runs one at its start and one before each return (capture/frames.py),
and a compiled function's wrapper one on each side of a call. It is

    TARGET.extend((-probe_id, now_ns()))

two C calls (a thread-local attribute read gives the current thread's buffer): no Python frame, so
Dynamo's frame hook never sees it, and about 0.15 µs. In the thread's int stream it reads as a call of
a graph with no ops (buffers.py), so the writer formats it as an instant event in its compiled loop.

Code with probes in it is not the code Dynamo generated: `original(code)` gives that back, for
readers of cache entries (the explanation's decompiled code).
"""

from __future__ import annotations

import types
import weakref

from dynascope.trace.buffers import _state, now_ns
from dynascope.trace.format import CALL_CAT, FRAME_CAT  # noqa: F401 - re-exported for capture/frames.py

TARGET = _state  # `TARGET.extend` is the current thread's buffer (or a sink that keeps nothing)
CLOCK = now_ns

_originals: weakref.WeakKeyDictionary[types.CodeType, types.CodeType] = weakref.WeakKeyDictionary()


def remember(probed: types.CodeType, original: types.CodeType) -> None:
    """`probed` is `original` with probes added."""
    _originals[probed] = original


def original(code: types.CodeType) -> types.CodeType:
    """The code Dynamo generated, for code that may have probes added (else `code` itself)."""
    return _originals.get(code, code)

