"""Per-thread raw event buffers: the only thing the hot path touches.

A compiled graph's generated code calls `sink()` once per call and gets the current thread's
`list.append`; it then appends `-graph_id`, a start clock reading, and one clock reading after each
op. Python-side events (user regions, compile phases) go to a side list, laid flat (see take_side),
with MARK in the main list where they happened, so the main list stays pure ints (cheap to turn into an array) and
one thread's records stay in order. The writer thread drains the lists; nothing here formats or
locks on the hot path.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

now_ns = time.perf_counter_ns
MARK = -(1 << 62)  # MARK - n in the main list: "side record n happened here" (graph ids are small)
_nowhere = collections.deque[object](maxlen=0)  # keeps nothing: tracing is off
_discard: Callable[[object], None] = _nowhere.append
_discard_many: Callable[[Any], None] = _nowhere.extend


@dataclass
class ThreadBuffer:
    tid: int
    thread_name: str
    records: list  # ints: graph headers, clock readings, MARKs
    side: list  # flat: n, len(record), *record for each record n; it belongs where MARK - n stands in `records`


class _Slot:
    """One thread's recording state. Plain slots: a threading.local's own attributes cost about twice
    as much to read and write, and emit() touches five of them per record."""

    __slots__ = ("append", "generation", "muted", "sequence", "side")

    def __init__(self) -> None:
        self.generation = -1
        self.append: Callable[[object], None] = _discard
        self.side: Callable[[Any], None] = _discard  # the side list's extend
        self.sequence = 0
        self.muted = False  # discard_this_thread(): nothing this thread records is kept


class _ThreadState(threading.local):
    slot: _Slot | None = None  # the thread's _Slot, made on its first record
    # The main list's `extend`, for probes (trace/probes.py): code that runs without a Python call of
    # ours reads it as an attribute. Kept equal to slot.append's list by _attach; a thread that has not
    # recorded yet in this session keeps nothing (the class default).
    extend: Callable[[Any], None] = _discard_many


_state = _ThreadState()
_lock = threading.Lock()
_generation = 0
_recording = False
_buffers: list[ThreadBuffer] = []
# The native id of each thread that has recorded, by the low 32 bits of its pthread id: CUPTI names the
# thread of a CUDA runtime or driver call that way, and torch's profiler passes it on unless it recorded
# CPU events on that thread itself (native_thread_id).
_native_by_pthread: dict[int, int] = {}
_natives: set[int] = set()


def recording() -> bool:
    """Whether a session records now."""
    return _recording


def sink():
    """The current thread's append function (a discarding one while no session records)."""
    slot = _state.slot
    if slot is None or slot.generation != _generation:
        slot = _attach()
    return slot.append


def _attach() -> _Slot:
    slot = _state.slot
    if slot is None:
        slot = _state.slot = _Slot()
    slot.generation = _generation
    if not _recording or slot.muted:
        slot.append = slot.side = _discard
        _state.extend = _discard_many
        return slot
    records: list = []
    side: list = []
    thread = threading.current_thread()
    native = threading.get_native_id()
    with _lock:
        _buffers.append(ThreadBuffer(native, thread.name, records, side))
        _native_by_pthread[threading.get_ident() & 0xFFFFFFFF] = native
        _natives.add(native)
    slot.append = records.append
    slot.side = side.extend
    _state.extend = records.extend
    return slot


def native_thread_id(tid: int) -> int:
    """The native id of the thread that torch's profiler names `tid`. For a CUDA call's thread that is
    CUPTI's id, the low 32 bits of the pthread id as a signed int, unless torch recorded CPU events on
    that thread in the same process (then it is the native id already): a thread that has recorded here
    is mapped back to its native id, anything else is left as it is."""
    if tid in _natives:
        return tid
    return _native_by_pthread.get(tid & 0xFFFFFFFF, tid)


def start_recording() -> None:
    """Called by a session when it opens: every thread gets a fresh buffer on its next record."""
    global _generation, _recording
    with _lock:
        _buffers.clear()
        _recording = True
        _generation += 1
    _attach()  # the opening thread records from now on, probes included (other threads: from their first record)


def stop_recording() -> list[ThreadBuffer]:
    """Called by a session when it closes; returns the buffers for a final drain."""
    global _generation, _recording
    with _lock:
        _recording = False
        _generation += 1
        buffers = list(_buffers)
        _buffers.clear()
    return buffers


def discard_this_thread() -> None:
    """Keep nothing the calling thread records, in this session and every later one.

    The writer thread calls it first: whatever it does itself (numba loading its cache, and any file
    I/O that implies) is dynascope's own work, not the program's.
    """
    slot = _state.slot
    if slot is None:
        slot = _state.slot = _Slot()
    slot.muted = True
    slot.generation = _generation
    slot.append = slot.side = _discard
    _state.extend = _discard_many


def forget_after_fork() -> None:
    """In a forked child: the parent's buffers are the parent's to write."""
    global _generation, _recording, _lock
    _lock = threading.Lock()
    _buffers.clear()
    _recording = False
    _generation += 1
    _state.extend = _discard_many  # the parent's list, copied: nothing more goes there


def registered() -> list[ThreadBuffer]:
    with _lock:
        return list(_buffers)


def take(buffer: ThreadBuffer) -> list:
    """Remove and return what the main list holds now; appends racing with this stay for next time.

    The side records for the MARKs taken are read with `take_side` (a side record is appended
    before its MARK, so it is there whenever its MARK is).
    """
    records = buffer.records
    n = len(records)
    chunk = records[:n]
    del records[:n]
    return chunk


def take_side(buffer: ThreadBuffer, last: int) -> list:
    """Remove and return the side records numbered up to `last`, as (n, record) pairs.

    The side list holds records flat (n, length, fields...), not as tuples: a tuple kept until the writer
    drains it (half a second) would outlive the garbage collector's young generations, and enough such
    survivors set off full collections, which walk the program's whole heap. Atoms (ints, strings,
    dicts of atoms) are not tracked by the collector at all."""
    side = buffer.side
    taken = []
    at, end = 0, len(side)
    while at + 1 < end and side[at] <= last:
        length = side[at + 1]
        taken.append((side[at], tuple(side[at + 2 : at + 2 + length])))
        at += 2 + length
    del side[:at]
    return taken


def private_emitter(thread_name: str) -> Callable[[tuple], None]:
    """For a thread of dynascope's own that records (the memory sampler) while it is muted for everything else
    (discard_this_thread: its file I/O, numba loading its cache, is not the program's): a buffer of its own,
    drained like a thread's, and the `emit` that writes to it. Call it from that thread, once recording."""
    if not _recording:
        return _discard
    records: list = []
    side: list = []
    with _lock:
        _buffers.append(ThreadBuffer(threading.get_native_id(), thread_name, records, side))
    sequence = 0

    def emit_here(record: tuple) -> None:
        nonlocal sequence
        sequence += 1
        side.extend((sequence, len(record), *record))
        records.append(MARK - sequence)

    return emit_here


def emit(record: tuple) -> None:
    """Record a Python-side event (region begin/end, complete event) for the current thread."""
    slot = _state.slot
    if slot is None or slot.generation != _generation:
        slot = _attach()
    # Numbered, so that an interrupt (Ctrl-C) landing between the two appends costs this one record,
    # not the pairing of every later one.
    slot.sequence = number = slot.sequence + 1
    slot.side((number, len(record), *record))  # one extend: an interrupt cannot split a record
    slot.append(MARK - number)
