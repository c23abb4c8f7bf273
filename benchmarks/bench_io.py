"""Python file I/O events (trace/fileio.py): the time tracing adds to each raw file call.

In one run, inside one trace session, the same loop of small reads or writes runs on a file object
opened with CPython's own `_io.open` (untraced) and on one opened with the tracing open (traced), in
turn, so machine noise hits both alike; their difference divided by the events recorded is the
added time per event on the program's thread (two clock readings and one buffer append, plus the
Python-level raw method). The writer thread turns events into lines every flush interval; that work
runs beside the program (and takes the GIL while it formats these events), and is reported apart as
writer µs/event. Timing: best of `--best` runs of `--calls` calls, median over `--repeats`.
No torch needed.

A buffered read served from the buffer records nothing, but still costs a little more traced: CPython's
buffered layer takes a slower path for its "closed" checks when the raw file is a subclass of FileIO.
That cost comes per call (added µs/call), so per event it is multiplied by the calls one raw read serves.
"""

from __future__ import annotations

import _io
import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

from common.results import publish

from dynascope.trace import fileio
from dynascope.trace.config import TraceConfig
from dynascope.trace.session import TraceSession

SMALL = 64  # bytes per call: small enough that the system call, not the copy, is the cost
BUFFER = 8192


def _cases(directory: str) -> list[tuple[str, Callable, Callable[[int], int]]]:
    """(name, make(open_function) -> loop(calls), events recorded for `calls` calls)."""
    source = os.path.join(directory, "source.bin")
    with _io.open(source, "wb") as handle:
        handle.write(os.urandom(1 << 22))

    def unbuffered_read(open_function):
        handle = open_function(source, "rb", buffering=0)

        def loop(calls: int) -> None:
            handle.seek(0)
            read = handle.read
            for _ in range(calls):
                read(SMALL)

        return loop

    def unbuffered_write(open_function):
        handle = open_function(os.path.join(directory, f"out-{id(open_function)}.bin"), "wb", buffering=0)
        data = b"x" * SMALL

        def loop(calls: int) -> None:
            handle.seek(0)
            write = handle.write
            for _ in range(calls):
                write(data)

        return loop

    def buffered_read(open_function):
        handle = open_function(source, "rb", buffering=BUFFER)

        def loop(calls: int) -> None:
            handle.seek(0)
            read = handle.read
            for _ in range(calls):
                read(SMALL)

        return loop

    def open_close(open_function):
        path = os.path.join(directory, "small.txt")
        with _io.open(path, "w", encoding="utf-8") as handle:
            handle.write("x")

        def loop(calls: int) -> None:
            for _ in range(calls):
                open_function(path, "rb", buffering=0).close()

        return loop

    return [
        (f"unbuffered read({SMALL})", unbuffered_read, lambda calls: calls),
        (f"unbuffered write({SMALL})", unbuffered_write, lambda calls: calls),
        (f"buffered read({SMALL}), {BUFFER} B buffer", buffered_read, lambda calls: calls * SMALL // BUFFER + 1),
        ("open + close (unbuffered)", open_close, lambda calls: 2 * calls),
    ]


def _time(loop: Callable[[int], None], calls: int) -> float:
    start = time.perf_counter()
    loop(calls)
    return time.perf_counter() - start


def measure(
    name: str, make: Callable, events_of: Callable[[int], int], args: argparse.Namespace, session: TraceSession
) -> dict:
    plain, traced = make(fileio.real_open), make(fileio.open)
    events = events_of(args.calls)
    writer_s: list[float] = []

    def flush() -> None:  # the writer's work for the last traced run, timed apart from the program's
        start = time.perf_counter()
        session.flush()
        writer_s.append(time.perf_counter() - start)

    for _ in range(2):  # warm up both
        _time(plain, args.calls)
        _time(traced, args.calls)
        flush()
    writer_s.clear()
    ratios, plain_us, traced_us = [], [], []
    for _ in range(args.repeats):
        p = t = float("inf")
        for _ in range(args.best):
            p = min(p, _time(plain, args.calls))
            t = min(t, _time(traced, args.calls))
            flush()
        ratios.append(t / p)
        plain_us.append(p / args.calls * 1e6)
        traced_us.append(t / args.calls * 1e6)
    plain_call, traced_call = statistics.median(plain_us), statistics.median(traced_us)
    return {
        "case": name,
        "events_per_call": events / args.calls,
        "untraced_us_per_call": plain_call,
        "traced_us_per_call": traced_call,
        "added_us_per_event": (traced_call - plain_call) * args.calls / events,
        "ratio": statistics.median(ratios),
        "writer_us_per_event": statistics.median(writer_s) / events * 1e6,
    }


def not_recording(directory: str, calls: int, best: int) -> dict:
    """A file opened while tracing, used after the session ended: the added cost of the flag test."""
    path = os.path.join(directory, "source.bin")
    handle = fileio.FileIO(path, "r")
    plain = _io.FileIO(path, "r")

    def loop(f):
        def run(n: int) -> None:
            f.seek(0)
            read = f.read
            for _ in range(n):
                read(SMALL)

        return run

    p = min(_time(loop(plain), calls) for _ in range(best))
    t = min(_time(loop(handle), calls) for _ in range(best))
    return {"untraced_us_per_call": p / calls * 1e6, "traced_us_per_call": t / calls * 1e6, "ratio": t / p}


def render(results: dict) -> str:
    idle = results["not_recording"]
    lines = [
        (
            f"Python {results['python']}, {results['calls']} calls, best of {results['best']}, "
            f"median of {results['repeats']}, traced and untraced in the same session:"
        ),
        "",
        "| case | events/call | untraced µs/call | traced µs/call | added µs/call | added µs/event | ratio | writer µs/event |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in results["cases"]:
        lines.append(
            f"| {row['case']} | {row['events_per_call']:.3g} | {row['untraced_us_per_call']:.2f} "
            f"| {row['traced_us_per_call']:.2f} | {row['traced_us_per_call'] - row['untraced_us_per_call']:.3f} "
            f"| {row['added_us_per_event']:.2f} | {row['ratio']:.2f}x "
            f"| {row['writer_us_per_event']:.2f} |"
        )
    lines += [
        "",
        (
            f"After the session (file still open, nothing recorded): {idle['untraced_us_per_call']:.2f} -> "
            f"{idle['traced_us_per_call']:.2f} µs per unbuffered read ({idle['ratio']:.2f}x)."
        ),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--best", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="2000 calls, best of 2, median of 3")
    parser.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results", "io.json"))
    args = parser.parse_args(argv)
    if args.quick:
        args.calls, args.best, args.repeats = 2000, 2, 3
    results: dict = {
        "python": sys.version.split()[0],
        "calls": args.calls,
        "best": args.best,
        "repeats": args.repeats,
        "cases": [],
    }
    with tempfile.TemporaryDirectory() as directory:
        # the writer thread does not flush on its own during the timings: each traced run is flushed
        # right after it, and that flush is timed as the writer's work
        config = TraceConfig(flush_interval_s=3600.0)
        session = TraceSession(os.path.join(directory, "bench.pfw"), config=config).open()
        try:
            for name, make, events_of in _cases(directory):
                results["cases"].append(measure(name, make, events_of, args, session))
        finally:
            session.finalize()
        results["not_recording"] = not_recording(directory, args.calls, args.best)
    publish(render(results), results, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
