"""Device activity on the timeline: which traced op launched each kernel, and its trace line.

`capture/device.py` collects what ran on a device (kernels, copies, memsets; from CUPTI through torch's
profiler) as `DeviceRecord`s: the device interval, and the CPU thread and instant of the launch call. The
op that launched it is the one whose interval on that thread holds the launch instant. The writer keeps
each thread's graph-call readings (the int runs it formats, `LaunchIndex.add`) while device activity is
collected, and joins each record to them when the records arrive: a few numpy passes per batch, off the
program's threads. Nothing is added to the hot path.

A device event is a complete event of category "gpu" on a track of its own per device and stream
(tid `gpu_tid(device, stream)`, named "GPU <device> stream <stream>"), with args `op` (the launching
op's OH record, so it carries the op's layer, phase and source line), `launcher` (that op's event name),
`device`, `stream`, `activity`, `ltid` (the launching thread) and `launch` (the launch instant, µs).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from dynascope.trace.ops import TABLE

_GPU_TID_BASE = 1 << 40  # far above any OS thread id; Chrome export renumbers tracks anyway


@dataclass(frozen=True)
class DeviceRecord:
    """One activity a device ran. Times are on the trace's clock (buffers.now_ns), nanoseconds."""

    name: str  # the kernel's name, "Memcpy HtoD (Pageable -> Device)", ...
    activity: str  # "kernel", "memcpy", "memset"
    device: int
    stream: int
    start_ns: int
    end_ns: int
    launch_tid: int  # native id of the CPU thread that launched it (0: unknown)
    launch_ns: int  # when the launch call started (0: unknown)


def gpu_tid(device: int, stream: int) -> int:
    """The track (tid) of a device's stream in the trace file."""
    return _GPU_TID_BASE + device * (1 << 20) + stream


class LaunchIndex:
    """Per thread, the graph-call readings formatted so far: -gid, t_start, t_op1 ... (ints, our clock)."""

    def __init__(self) -> None:
        self._runs: dict[int, list[np.ndarray]] = defaultdict(list)
        self._joined: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def add(self, tid: int, values: np.ndarray) -> None:
        """A run of whole graph calls of thread `tid`, as the decoder formatted them."""
        if values.size:
            self._runs[tid].append(values.copy())
            self._joined.pop(tid, None)

    def launchers(self, tid: int, at_ns: np.ndarray) -> np.ndarray:
        """For each instant (our clock) on thread `tid`: the spec index of the op running then, else -1
        (between graph calls, or in a graph call's own code before its first op)."""
        out = np.full(at_ns.shape, -1, dtype=np.int64)
        joined = self._readings(tid)
        if joined is None or not at_ns.size:
            return out
        times, gids, positions = joined
        after = np.searchsorted(times, at_ns, side="right")  # the first reading later than the instant
        inside = after < times.size
        j = after[inside]
        ends_an_op = (positions[j] >= 1) & (j >= 1)
        j_op = j[ends_an_op]
        _graph_spec, op_base, _n_ops = TABLE.arrays()
        specs = np.full(j.shape, -1, dtype=np.int64)
        specs[ends_an_op] = op_base[gids[j_op]] + positions[j_op] - 1
        out[inside] = specs
        return out

    def forget_before(self, t_ns: int) -> None:
        """Drop the runs that ended before `t_ns` (our clock): no launch still to come is in them."""
        for tid, runs in self._runs.items():
            keep = [r for r in runs if int(r.max(initial=0)) >= t_ns]
            if len(keep) != len(runs):
                self._runs[tid] = keep
                self._joined.pop(tid, None)

    def _readings(self, tid: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(reading times, graph id, position in its call: 0 = the call's start, k = op k's end), by time."""
        cached = self._joined.get(tid)
        if cached is not None:
            return cached
        runs = self._runs.get(tid)
        if not runs:
            return None
        values = np.concatenate(runs)
        index = np.arange(values.size)
        header = values < 0
        last_header = np.maximum.accumulate(np.where(header, index, -1))
        reading = ~header & (last_header >= 0)
        times = values[reading]
        gids = -values[last_header[reading]]
        positions = (index - last_header - 1)[reading]
        order = np.argsort(times, kind="stable")
        cached = self._joined[tid] = (times[order], gids[order], positions[order])
        return cached


def device_args(record: DeviceRecord, op_number: int | None, launcher: str | None, offset_ns: int) -> dict:
    """The args of a device event (see the module docstring); `offset_ns` turns the trace's clock into epoch ns."""
    args: dict = {}
    if op_number is not None:
        args["op"] = op_number
        args["launcher"] = launcher
    args.update(device=record.device, stream=record.stream, activity=record.activity)
    if record.launch_tid:
        args["ltid"] = record.launch_tid
    if record.launch_ns:
        args["launch"] = (record.launch_ns + offset_ns) // 1000
    return args


def by_thread(records: list[DeviceRecord]) -> dict[int, list[int]]:
    """Indexes of the records, grouped by launching thread."""
    groups: dict[int, list[int]] = defaultdict(list)
    for i, r in enumerate(records):
        groups[r.launch_tid].append(i)
    return groups
