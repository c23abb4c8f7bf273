"""The trace file and the thread that fills it.

Every flush drains the per-thread buffers, decodes them to lines, and appends them to the file as
one gzip member (or plain text), then flushes the OS file. A reader can stop after any member, so a
killed process leaves every earlier line readable.
"""

from __future__ import annotations

import _io
import collections
import sys
import threading
import zlib
from collections.abc import Callable
from types import ModuleType

import orjson

from dynascope.trace import buffers, forklock
from dynascope.trace.decode import Decoder, ThreadStream
from dynascope.trace.launches import DeviceRecord, LaunchIndex

_fast_zlib: ModuleType | None
try:  # ISA-L's deflate: several times faster than zlib at a similar ratio, same gzip format
    from isal import isal_zlib as _fast_zlib
except ImportError:  # pragma: no cover - isal is a dependency; stay correct without it
    _fast_zlib = None


class TraceWriter:
    def __init__(self, path: str, *, compression: bool, level: int, interval_s: float, decoder: Decoder) -> None:
        self.path = path
        self.compression = compression
        self.level = level
        self.interval_s = interval_s
        self.decoder = decoder
        # CPython's own open, never the tracing one (fileio.py): the trace file's writes are not the program's I/O
        self._file = _io.open(path, "wb")  # the writer's own file, closed by close()
        self._streams: dict[int, ThreadStream] = {}
        self._named_threads: set[int] = set()
        self._flush_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failure: str | None = None
        # batches of device activity (made into records when called), and the instant they reach
        self._device: collections.deque[tuple[Callable[[], list[DeviceRecord]], int]] = collections.deque()

    def start(self, header_lines: list[str]) -> None:
        self.write(["[", *header_lines])
        self._thread = threading.Thread(target=self._run, name="dynascope-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        buffers.discard_this_thread()  # what this thread does (numba's cache files) is not the program's
        try:
            with forklock.lock:  # a fork meanwhile would leave the import half-done in the child
                from dynascope.trace import oplines

                oplines.warm_up()  # compiled once per machine, then loaded from numba's cache: off the user's thread
        except Exception as exc:  # noqa: BLE001 - flushes will fail and say so too; the program goes on
            self._report_failure(exc)
        while not self._stop.wait(self.interval_s):
            self.flush()

    def flush(self, final_buffers: list[buffers.ThreadBuffer] | None = None) -> None:
        """Drain the buffers into the file as one gzip member. With `final_buffers`, drain those completely."""
        self._flush(final_buffers, final_buffers is not None)

    def _flush(self, final_buffers: list[buffers.ThreadBuffer] | None, final: bool) -> None:
        with self._flush_lock:
            if self._file.closed:
                return
            member = Member(self.compression, self.level)
            # only the device batches handed over before the drains: the readings that launched them are
            # drained now; one handed over meanwhile waits for the next flush, which drains its readings
            ready = len(self._device)
            try:
                for buffer in final_buffers if final_buffers is not None else buffers.registered():
                    self._drain(buffer, final, member.add)
                self._device_out(member.add, ready)
            except Exception as exc:  # noqa: BLE001 - the trace must not take the user's program down
                self._report_failure(exc)
            if member.size:
                self._write_out(member.finish())

    def _drain(self, buffer: buffers.ThreadBuffer, final: bool, emit) -> None:
        key = id(buffer.records)
        stream = self._streams.get(key)
        if stream is None:
            stream = self._streams[key] = ThreadStream(buffer.tid)
        chunk = buffers.take(buffer)
        if not (chunk or (final and (stream.pending.size or stream.regions))):
            return
        if buffer.tid not in self._named_threads:
            self._named_threads.add(buffer.tid)
            emit(self.thread_name_line(buffer))
        self.decoder.decode(stream, chunk, lambda last: buffers.take_side(buffer, last), final, emit)

    def collect_launches(self) -> None:
        """Device activity will come (add_device_records): keep each thread's readings to join it to."""
        if self.decoder.launches is None:
            self.decoder.launches = LaunchIndex()

    def add_device_records(self, collected: Callable[[], list[DeviceRecord]], until_ns: int) -> None:
        """Device activity launched up to `until_ns` (our clock), written at the next flush: `collected()`
        makes its records there, in this thread, not the program's."""
        self._device.append((collected, until_ns))

    def _device_out(self, emit, ready: int) -> None:
        for _ in range(ready):
            collected, until_ns = self._device.popleft()
            records = collected()
            if records:
                emit(self.decoder.device_lines(records))
            if self.decoder.launches is not None:
                self.decoder.launches.forget_before(until_ns)

    def open_regions(self, drained: list[buffers.ThreadBuffer]) -> list[dict]:
        """The regions open on each thread, innermost last, as far as the drained records say."""
        names = {b.tid: b.thread_name for b in drained}
        return [
            {"tid": s.tid, "thread": names.get(s.tid, ""), "regions": [r.name for r in s.regions]}
            for s in self._streams.values()
            if s.regions
        ]

    def thread_named(self, tid: int) -> None:
        """The header already named this thread."""
        self._named_threads.add(tid)

    def thread_name_line(self, buffer: buffers.ThreadBuffer) -> bytes:
        args = {"hhash": self.decoder.hhash, "name": buffer.thread_name, "value": "thread_name"}
        record = {
            "name": "thread_name",
            "cat": "dftracer",
            "pid": self.decoder.pid,
            "tid": buffer.tid,
            "ph": "M",
            "args": args,
        }
        return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)

    def write(self, lines: list[str]) -> None:
        """Append text lines as one gzip member."""
        member = Member(self.compression, self.level)
        member.add("".join(line + "\n" for line in lines).encode("utf-8", "surrogatepass"))
        self._write_out(member.finish())

    def _write_out(self, data: bytes) -> None:
        self._file.write(data)
        self._file.flush()

    def close(self, final_buffers: list[buffers.ThreadBuffer], end_line: Callable[[], str],
              cut_line: Callable[[list[dict]], str] | None = None) -> None:
        """Write what is left and the `end` line. A trace cut by a signal (`cut_line`): first what was
        recorded, then the cut record made from the regions still open on each thread, then the rest."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        if cut_line is not None:
            self._flush(final_buffers, False)
            self.write([cut_line(self.open_regions(final_buffers))])
        self.flush(final_buffers)
        with self._flush_lock:
            if not self._file.closed:
                self.write([end_line()])
                self._file.close()

    def _report_failure(self, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = f"{type(exc).__name__}: {exc}"
            print(f"dynascope: trace writer error, some events were lost: {self._failure}", file=sys.stderr)


class Member:
    """One gzip member (or a run of plain text) built from pieces of whole lines as they come."""

    def __init__(self, compression: bool, level: int) -> None:
        self._compressor = new_member(level) if compression else None
        self._parts: list[bytes] = []
        self.size = 0  # uncompressed bytes added

    def add(self, data: bytes | memoryview) -> None:
        self.size += len(data)
        self._parts.append(self._compressor.compress(data) if self._compressor else bytes(data))

    def finish(self) -> bytes:
        if self._compressor:
            self._parts.append(self._compressor.flush())
        return b"".join(self._parts)


def new_member(level: int):
    """A compressor producing one complete gzip member. Levels 0-3 are ISA-L's, 4-9 zlib's (denser, slower)."""
    if _fast_zlib is not None and level <= 3:
        return _fast_zlib.compressobj(level, _fast_zlib.DEFLATED, 31)
    return zlib.compressobj(level, zlib.DEFLATED, 31)
