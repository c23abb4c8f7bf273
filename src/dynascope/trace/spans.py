"""Begin/end pairs into spans, the way torch's compile timers publish them: chromium "B" and "E"
events on torch's structured log, each end naming the span it closes.

One home for what capture/ (compile phases as trace events) and explain/ (compile time per phase)
both read from that log. The trace reader (analyze/) pairs B/E lines of trace files its own way:
Chrome's format lets an "E" carry no name, so there the innermost open span closes.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Span:
    name: str
    start: float
    end: float
    args: dict[str, Any] = field(default_factory=dict)
    outermost: bool = True  # no span of the same name is still open around it


class OpenSpans:
    """Spans begun and not yet ended, kept apart per key (a thread, a compile id)."""

    def __init__(self) -> None:
        self._open: dict[Hashable, list[tuple[str, float, dict[str, Any]]]] = {}

    def begin(self, key: Hashable, name: str, ts: float, args: dict[str, Any] | None = None) -> None:
        self._open.setdefault(key, []).append((name, ts, args if args is not None else {}))

    def end(self, key: Hashable, name: str, ts: float) -> Span | None:
        """Close the innermost open span of this name under `key` (spans opened inside it and never
        closed are dropped); None when no such span is open."""
        stack = self._open.get(key) or []
        for index in range(len(stack) - 1, -1, -1):
            if stack[index][0] == name:
                _, start, args = stack[index]
                del stack[index:]
                outermost = all(open_name != name for open_name, _, _ in stack)
                return Span(name, start, ts, args, outermost)
        return None

    def open_spans(self) -> list[tuple[Hashable, str, float, dict[str, Any]]]:
        """(key, name, start, args) of every span open now, under every key (a copy: safe while other
        threads begin and end spans)."""
        return [(key, name, ts, args) for key, stack in list(self._open.items()) for name, ts, args in list(stack)]
