"""What reading found besides the events: counts of what was skipped, and why.

`FileLog` is the one place a file's reading records damage (torn lines, cut gzip members, unpaired `B`
events); `ReadInfo` is what callers get, merged over files.
"""

from __future__ import annotations

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

    def warn(self, msg: str) -> None:
        self.warnings.append(f"{self.name}: {msg}")

    def info(
        self, events: int, thread_names: dict[tuple, str], marks: list[dict], sources: dict[str, str] | None = None
    ) -> ReadInfo:
        return ReadInfo(
            files=[self.name],
            events=events,
            dropped_lines=self.dropped_lines,
            dropped_events=self.dropped_events,
            warnings=list(self.warnings),
            unpaired=self.unpaired,
            skipped_events=self.skipped_events,
            truncated=[self.name] if self.truncated_gzip else [],
            thread_names=dict(thread_names),
            marks=list(marks),
            sources=dict(sources or {}),
        )
