"""The explain side's one piece of process state: the compile observer running now, and the one that
ran last, whose observations explain() reads when it is not handed an observer.

One explicit object, SESSION, instead of module globals: observer.py registers with it, api.py reads
it, and neither needs to import the other for that.
"""

from __future__ import annotations

from typing import Any


class ObserverSession:
    def __init__(self) -> None:
        self.active: Any = None  # the Observer running now
        self.last: Any = None  # the Observer that stopped most recently

    def started(self, observer: Any) -> None:
        self.active = observer

    def stopped(self, observer: Any) -> None:
        if self.active is observer:
            self.active = None
        self.last = observer

    def current(self) -> Any:
        """The active observer, else the most recently stopped one, else None."""
        return self.active or self.last

    def end(self) -> None:
        """Stop the active observer and forget both (a clean slate, as tests want between runs)."""
        if self.active is not None:
            self.active.stop()
        self.active = self.last = None


SESSION = ObserverSession()
