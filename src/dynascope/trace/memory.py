"""Memory in use, sampled off the hot path: a counter track in the trace (`"ph":"C"`, `"cat":"memory"`).

A reading of the process's memory costs about a microsecond here (a system call), more than a whole graph
call's tracing, so nothing is read on the hot path. A sampler thread reads the resident set size
(/proc/self/statm) every DYNASCOPE_MEMORY_INTERVAL_US (default 1000) in a compiled loop that holds no
GIL, so the program never waits for it. It keeps a sample where the figure moved by at least
DYNASCOPE_MEMORY_STEP_KB (default 256) since the last one kept, each batch's highest sample, and one a
second, and hands them to the trace every BATCH_NS. Readers registered from above (capture/memory.py:
the CUDA caching allocator's counters) are read once per batch, under the GIL.

What the resident set size misses: memory the allocator keeps after the program freed it still counts
(glibc keeps most frees below 32 MB for reuse), memory allocated but never touched does not count yet,
and anything that lived for less than the interval may fall between two samples (docs/memory.md).
Linux only: elsewhere there is no memory track. Where the sampler cannot read, the end record's
`memory_error` says why.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from types import ModuleType

import numpy as np

from dynascope.trace import buffers, forklock
from dynascope.trace.format import MEMORY_CAT

BATCH_NS = 50_000_000  # how often the samples reach the trace
KEEP_AT_LEAST_NS = 1_000_000_000  # one sample a second even when nothing moves
STATM = "/proc/self/statm"
_readers: dict[str, Callable[[], dict[str, int]]] = {}


def add_reader(name: str, read: Callable[[], dict[str, int]]) -> None:
    """Read `read()` (counter name -> bytes) once per batch, as counter track `name`, while sampling."""
    _readers[name] = read


def remove_reader(name: str) -> None:
    _readers.pop(name, None)


def resident_bytes() -> int | None:
    """The process's resident set size now (one reading, in Python), or None where it cannot be read."""
    try:
        fd = os.open(STATM, os.O_RDONLY)  # os-level: not the program's file I/O (trace/fileio.py)
        try:
            return int(os.read(fd, 128).split()[1]) * os.sysconf("SC_PAGE_SIZE")
        finally:
            os.close(fd)
    except (OSError, ValueError, IndexError):
        return None


_OUT_OF_MEMORY_TEXT = ("can't allocate memory", "out of memory", "cannot allocate memory")


def is_out_of_memory(error: BaseException) -> bool:
    """MemoryError, torch's OutOfMemoryError (CUDA), or CPU torch's allocator failing ("DefaultCPUAllocator:
    can't allocate memory", a RuntimeError)."""
    if isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError":
        return True
    return isinstance(error, RuntimeError) and any(t in str(error).lower() for t in _OUT_OF_MEMORY_TEXT)


def available() -> bool:
    return sys.platform.startswith("linux") and os.path.exists(STATM)


class Sampler:
    """The sampler thread of one trace session."""

    def __init__(self, interval_us: int, step_bytes: int) -> None:
        self.interval_ns = max(1, interval_us) * 1000
        self.step_bytes = max(0, step_bytes)
        self._stop = np.zeros(1, dtype=np.int64)
        self._thread: threading.Thread | None = None
        self.error: str | None = None
        self.ready = threading.Event()  # set once the loop is loaded and sampling (or could not start)
        self._emit: Callable[[tuple], None] = lambda record: None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="dynascope-memory", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop after one last batch (its samples reach the trace before this returns)."""
        self._stop[0] = 1
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)
        self._thread = None

    def _run(self) -> None:
        buffers.discard_this_thread()  # numba loading its cache is dynascope's own file I/O, not the program's
        self._emit = buffers.private_emitter("dynascope-memory")
        try:
            fd = os.open(STATM, os.O_RDONLY)
        except OSError as exc:
            self._stopped(f"no memory track (cannot read {STATM}: {exc.strerror})")
            return
        try:
            self._sample(fd, _load(fd))  # numba: loaded in this thread, not the program's
        except Exception as exc:  # noqa: BLE001 - the trace goes on without the memory track
            self._stopped(f"no memory track ({type(exc).__name__}: {exc})")
        finally:
            self.ready.set()
            os.close(fd)

    def _stopped(self, why: str) -> None:
        self.error = why
        self.ready.set()

    def _sample(self, fd: int, memory_loop: ModuleType) -> None:
        size = 2 * (BATCH_NS // self.interval_ns) + 4
        times = np.zeros(size, dtype=np.int64)
        values = np.zeros(size, dtype=np.int64)
        state = np.zeros(3, dtype=np.int64)  # last kept value, its time, the page size
        state[0], state[2] = -1, os.sysconf("SC_PAGE_SIZE")
        scratch = np.zeros(128, dtype=np.uint8)
        self.ready.set()
        while True:
            n = memory_loop.sample(fd, scratch, times, values, state, self.interval_ns, self.step_bytes,
                                   BATCH_NS, KEEP_AT_LEAST_NS, self._stop)  # fmt: skip
            if n < 0:
                self._stopped("no memory track (reading /proc/self/statm failed)")
                return
            if n:
                flat = np.column_stack((times[:n], values[:n])).ravel().tolist()
                self._emit(("C", "memory", MEMORY_CAT, "rss", *flat))
            self._read_others()
            if self._stop[0]:
                return

    def _read_others(self) -> None:
        now = buffers.now_ns()
        for name, read in list(_readers.items()):
            try:
                counters = read()
            except Exception:  # noqa: BLE001 - that track stops; the others go on
                remove_reader(name)
                continue
            if counters:
                self._emit(("C", name, MEMORY_CAT, ",".join(counters), now, *counters.values()))


def _load(fd: int) -> ModuleType:
    """The compiled loop, compiled (or loaded from numba's on-disk cache) by one sample taken with the stop
    flag up, under the lock a fork waits for (trace/forklock.py)."""
    with forklock.lock:
        from dynascope.trace import memory_loop

        state = np.array([-1, 0, 4096], dtype=np.int64)
        times, values = np.zeros(8, dtype=np.int64), np.zeros(8, dtype=np.int64)
        memory_loop.sample(fd, np.zeros(128, dtype=np.uint8), times, values, state, 1000, 0, 1, 1, np.ones(1, np.int64))
    return memory_loop


def warm_up() -> None:
    """Compile the sampler's loop (or load it from numba's on-disk cache) now."""
    if not available():
        return
    fd = os.open(STATM, os.O_RDONLY)
    try:
        _load(fd)
    finally:
        os.close(fd)
