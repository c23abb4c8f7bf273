"""What reading found besides the events: counts of what was skipped, and why.

`FileLog` is the one place a file's reading records damage (torn lines, cut gzip members, unpaired `B`
events); `ReadInfo` is what callers get, merged over files.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["FileLog", "ReadInfo", "TraceWarning"]


class TraceWarning(UserWarning):
    """Something in a trace was skipped (a torn line, a truncated gzip member, a corrupt record)."""


@dataclass
class ReadInfo:
    """What reading found besides the events.

    `dropped_lines`: lines skipped as unreadable. `dropped_events`: the writers' own count of events they
    could not write (`end` args). `unpaired`: `B` events without their `E`, and `E` without a `B`.
    `skipped_events`: records of phases that are no events (flows, async and object records).
    `truncated`: files whose gzip stream was cut short. `thread_names`: (pid, tid) -> name, from the
    traces' `thread_name` records. `marks`: instants and counters, kept only when asked for.
    `sources`: the code of inductor kernels (`KS` records), by the hash their events' `source` gives.
    """

    files: list[str] = field(default_factory=list)
    events: int = 0
    dropped_lines: int = 0
    dropped_events: int = 0
    warnings: list[str] = field(default_factory=list)
    unpaired: int = 0
    skipped_events: int = 0
    truncated: list[str] = field(default_factory=list)
    thread_names: dict[tuple, str] = field(default_factory=dict)
    marks: list[dict] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)

    @classmethod
    def merged(cls, infos: Iterable[ReadInfo]) -> ReadInfo:
        """What reading many files found, in their order."""
        out = cls()
        for one in infos:
            out.files += one.files
            out.events += one.events
            out.dropped_lines += one.dropped_lines
            out.dropped_events += one.dropped_events
            out.warnings += one.warnings
            out.unpaired += one.unpaired
            out.skipped_events += one.skipped_events
            out.truncated += one.truncated
            out.thread_names.update(one.thread_names)
            out.marks += one.marks
            out.sources.update(one.sources)
        return out


@dataclass
class FileLog:
    """One file's reading record: what was dropped and the warnings to give."""

    name: str
    dropped_lines: int = 0
    dropped_events: int = 0
    unpaired: int = 0
    skipped_events: int = 0
    truncated_gzip: bool = False
    warnings: list[str] = field(default_factory=list)
    # a dynascope or DFTracer file: its `start`, its `end`, a `cut` record (args)
    started_us: float | None = None
    ended: bool = False
    cut: dict | None = None
    cut_us: float | None = None

    def warn(self, msg: str) -> None:
        self.warnings.append(f"{self.name}: {msg}")

    def saw(self, e: dict, args: dict) -> None:
        """A complete event read by the record reader: keep what says how the file ended."""
        if e.get("cat") != "dftracer":
            return
        try:
            ts = float(e.get("ts") or 0)
        except (TypeError, ValueError):
            return
        name = e.get("name")
        if name == "start":
            self.started_us = ts
        elif name == "end":
            self.ended = True
        elif name == "cut":
            self.cut, self.cut_us = args, ts

    def _when(self, us: float | None) -> str:
        if us is None:
            return "an unknown time"
        stamp = time.strftime("%H:%M:%S", time.gmtime(us / 1e6)) + f".{int(us % 1e6) // 1000:03d} UTC"
        if self.started_us is not None and us >= self.started_us:
            stamp += f" ({(us - self.started_us) / 1e6:.1f} s after its start)"
        return stamp

    def end_warnings(self) -> list[str]:
        """A trace cut by a signal, or one without its end record (SIGKILL, a crash): what to say."""
        if self.started_us is None:
            return []  # not a dynascope/DFTracer process file: nothing to expect
        if self.cut is not None:
            sig = self.cut.get("signal") or "a signal"
            listed = self.cut.get("pending")
            pending: list = listed if isinstance(listed, list) else []
            waits = [f"{p.get('op', '?')} (pg {p.get('pg', '?')}, seq {p.get('seq', '?')})"
                     for p in pending if isinstance(p, dict)]  # fmt: skip
            more = f" and {len(waits) - 3} more" if len(waits) > 3 else ""
            what = f"; it was waiting in {', '.join(waits[:3])}{more}" if waits else ""
            return [f"{self.name}: cut by {sig} at {self._when(self.cut_us)}: the process was stopped{what}"]
        if not self.ended:
            # (no "last event at": the byte scanner takes op lines past the record reader, so which reader
            # read a file would change the time)
            return [f"{self.name} ends without its end record: the process was killed (SIGKILL) or crashed"]
        return []

    def info(
        self, events: int, thread_names: dict[tuple, str], marks: list[dict], sources: dict[str, str] | None = None
    ) -> ReadInfo:
        return ReadInfo(
            files=[self.name],
            events=events,
            dropped_lines=self.dropped_lines,
            dropped_events=self.dropped_events,
            warnings=list(self.warnings) + self.end_warnings(),
            unpaired=self.unpaired,
            skipped_events=self.skipped_events,
            truncated=[self.name] if self.truncated_gzip else [],
            thread_names=dict(thread_names),
            marks=list(marks),
            sources=dict(sources or {}),
        )
