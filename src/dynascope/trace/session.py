"""A trace session: one trace file for this process, from initialize to finalize.

There is at most one active session per process. It closes its file properly on finalize(), at
interpreter exit (normal, uncaught exception, Ctrl-C), on SIGTERM, and in multiprocessing children
on their way out. A forked child opens a file of its own.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson

from dynascope._version import __version__
from dynascope.errors import SessionError
from dynascope.trace import buffers, fileio, installers, memory
from dynascope.trace.config import TraceConfig, env
from dynascope.trace.decode import Decoder
from dynascope.trace.hashing import hash16
from dynascope.trace.writer import TraceWriter

DEFAULT_NAME = "dynascope"

_active: TraceSession | None = None
_active_lock = threading.RLock()


def resolve_path(logfile: str | None, compression: bool, *, extension_decides: bool = False) -> tuple[str, bool]:
    """`<name>-<pid>.pfw[.gz]` from a user's log file name (or DYNASCOPE_/DFTRACER_LOG_FILE).

    With `extension_decides`, an explicit `.pfw` or `.pfw.gz` suffix chooses the compression.
    """
    base = logfile or env("LOG_FILE") or DEFAULT_NAME
    base = os.path.expanduser(os.fspath(base))
    for suffix, gz in ((".pfw.gz", True), (".pfw", False), (".gz", True)):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
            if extension_decides:
                compression = gz
            break
    path = f"{base}-{os.getpid()}.pfw" + (".gz" if compression else "")
    return os.path.abspath(path), compression


def _distributed_identity() -> tuple[int, int, int]:
    """(rank, world_size, local_rank): torch.distributed when it is up, else the launcher's variables."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "-1"))
    except Exception:  # noqa: BLE001 - a broken process group falls back to the launcher's variables
        pass

    def number(name: str, default: int) -> int:
        try:
            return int(os.environ.get(name, default))
        except ValueError:
            return default

    return number("RANK", -1), number("WORLD_SIZE", 1), number("LOCAL_RANK", -1)


class TraceSession:
    """One trace file. Use `dynascope.session(path)`; it is also a context manager."""

    def __init__(
        self,
        path: str | None = None,
        *,
        config: TraceConfig | None = None,
        data_dir: str | None = None,
        extension_decides: bool = True,
    ) -> None:
        self.config = config or TraceConfig.from_env()
        self.requested_path = path
        self.data_dir = data_dir or env("DATA_DIR")
        self.extension_decides = extension_decides
        self.path, compression = resolve_path(path, self.config.compression, extension_decides=extension_decides)
        self.compression = compression
        self.pid = os.getpid()
        self.closed = False
        self.implicit = False  # started by ensure_session(); an explicit session replaces it
        self._writer: TraceWriter | None = None
        self._sampler: memory.Sampler | None = None
        self._error: BaseException | None = None  # what ended the program (finalize)

    # -- lifecycle ------------------------------------------------------------------------------

    def open(self) -> TraceSession:
        global _active
        with _active_lock:
            if _active is not None and _active is not self and _active.implicit:
                _active.finalize()  # the default session yields to the one the user asked for
            if _active is not None and _active is not self:
                raise SessionError(
                    f"a trace session is already writing {_active.path}; finalize it before starting another"
                )
            directory = os.path.dirname(self.path)
            try:
                os.makedirs(directory, exist_ok=True)
                hostname = socket.gethostname()
                self.hhash = hash16(hostname)
                self.offset_ns = time.time_ns() - buffers.now_ns()
                decoder = Decoder(self.pid, self.hhash, self.offset_ns, self.config.inline_args)
                self._writer = TraceWriter(
                    self.path,
                    compression=self.compression,
                    level=self.config.compression_level,
                    interval_s=self.config.flush_interval_s,
                    decoder=decoder,
                )
            except OSError as exc:
                raise SessionError(
                    f"cannot write the trace file {self.path}: {exc.strerror or exc}; "
                    "choose a writable location (the path argument, or DFTRACER_LOG_FILE)"
                ) from None
            buffers.start_recording()
            self._writer.start(self._header_lines(hostname))
            if self.config.memory and memory.available():
                self._sampler = memory.Sampler(self.config.memory_interval_us, self.config.memory_step_kb * 1024)
                self._sampler.start()
            if not self.config.disable_io:
                fileio.install()  # a forked child finds it installed already
            _active = self
            _install_exit_hooks()
            _torch_side_events("install", self)
        return self

    def finalize(self, error: BaseException | None = None) -> str:
        """Close the file; returns its path. `error`: what ended the program, said in the end record (with what
        was running, and for an out-of-memory error the memory in use). A second call does nothing but say
        so on stderr."""
        global _active
        with _active_lock:
            if self.closed:
                print(f"dynascope: finalize() called again; the trace {self.path} is already complete", file=sys.stderr)
                return self.path
            self.closed = True
            self._error = error
            if _active is self:
                _active = None
                _torch_side_events("uninstall", self)
            if self.pid == os.getpid():
                fileio.uninstall()
                if self._sampler is not None:
                    self._sampler.stop()  # its last samples reach the buffers before they are taken
            final_buffers = buffers.stop_recording()
            if self._writer is not None and self.pid == os.getpid():
                self._writer.close(final_buffers, self._end_line)
        return self.path

    def cut(self, signame: str, *, dying: bool) -> None:
        """Close the file because the process got `signame`: a `cut` record (the signal, the collectives
        pending by the cut reporters, the regions open on each thread), then the `end` record with `cut`.
        `dying`: the process is killed right after (the watcher thread, while the main thread may be
        blocked in C): torch's hooks and the I/O probes are left in place, nothing is waited for."""
        global _active
        if not _active_lock.acquire(timeout=2.0):  # finalize is under way elsewhere
            return
        try:
            if self.closed or self.pid != os.getpid():
                return
            self.closed = True
            pending: list[dict] = []
            for reporter in list(_cut_reporters):
                try:
                    pending += [dict(p) for p in reporter() or []]
                except Exception as exc:  # noqa: BLE001 - the cut record goes on without that reporter
                    print(f"dynascope: a cut reporter failed ({type(exc).__name__}: {exc})", file=sys.stderr)
            if _active is self:
                _active = None
                if not dying:
                    _torch_side_events("uninstall", self)
            if not dying:
                fileio.uninstall()
            final_buffers = buffers.stop_recording()
            if self._writer is not None:
                self._writer.close(final_buffers, lambda: self._end_line(cut=signame),
                                   lambda open_regions: self._cut_line(signame, pending, open_regions))  # fmt: skip
        finally:
            _active_lock.release()

    def __enter__(self) -> TraceSession:
        return self if _active is self else self.open()

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if not self.closed:
            self.finalize(exc)

    def memory_sampler_ready(self, timeout: float) -> bool:
        """Wait until the memory sampler takes its first sample (its compiled loop loads in its own thread, a
        fraction of a second after the session opens); False where there is none. `dynascope run` waits for it
        before the program starts, and so do tests and benchmarks."""
        return self._sampler is not None and self._sampler.ready.wait(timeout) and self._sampler.error is None

    def flush(self) -> None:
        """Write everything recorded so far (the writer also does this on its own every interval)."""
        if self._writer is not None and not self.closed:
            self._writer.flush()

    def collect_launches(self) -> None:
        """Device activity will be added (capture/device.py): the writer keeps what launched it."""
        if self._writer is not None and not self.closed:
            self._writer.collect_launches()

    def add_device_records(self, collected: Callable[[], list], until_ns: int) -> None:
        """Device activity launched up to `until_ns` (our clock), for the next flush; `collected()` makes
        its launches.DeviceRecord list in the writer thread."""
        if self._writer is not None:
            self._writer.add_device_records(collected, until_ns)

    @property
    def events_written(self) -> int:
        return self._writer.decoder.events if self._writer else 0

    @property
    def events_dropped(self) -> int:
        return self._writer.decoder.dropped if self._writer else 0

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<dynascope TraceSession {state} {self.path}>"

    # -- records --------------------------------------------------------------------------------

    def _meta(self, name: str, args: dict) -> str:
        tid = threading.get_native_id()
        record = {
            "name": name,
            "cat": "dftracer",
            "pid": self.pid,
            "tid": tid,
            "ph": "M",
            "args": {"hhash": self.hhash, **args},
        }
        return orjson.dumps(record).decode()

    def _header_lines(self, hostname: str) -> list[str]:
        argv = [sys.executable, *sys.argv]
        cmdline = ";".join(a.replace("\n", " ") for a in argv)
        exec_name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
        cwd = os.getcwd()
        rank, world_size, local_rank = _distributed_identity()
        hashes = {"cmd": hash16(cmdline), "exec": hash16(exec_name), "cwd": hash16(cwd)}
        label = f"{exec_name} [rank {rank}]" if rank >= 0 else f"{exec_name} (pid {self.pid})"
        tid = threading.get_native_id()
        assert self._writer is not None
        self._writer.thread_named(tid)
        start_args = {
            "hhash": self.hhash,
            "cmd_hash": hashes["cmd"],
            "exec_hash": hashes["exec"],
            "cwd": hashes["cwd"],
            "version": f"dynascope-{__version__}",
            "date": time.strftime("%a %b %d %H:%M:%S %Y"),
            "ppid": os.getppid(),
            "host": hostname,
            "rank": rank,
            "world_size": world_size,
            "local_rank": local_rank,
            "p_idx": -1,
            "level": 1,
        }
        if self.data_dir:
            start_args["data_dir"] = self.data_dir
        start = {
            "id": 1, "name": "start", "cat": "dftracer", "pid": self.pid, "tid": tid,
            "ts": (buffers.now_ns() + self.offset_ns) // 1000, "dur": 0, "ph": "X", "args": start_args,
        }  # fmt: skip
        return [
            self._meta("HH", {"name": hostname, "value": self.hhash}),
            self._meta("thread_name", {"name": threading.current_thread().name, "value": "thread_name"}),
            self._meta("process_name", {"name": label}),
            self._meta("FH", {"name": cwd, "value": hashes["cwd"]}),
            self._meta("SH", {"name": cmdline, "value": hashes["cmd"]}),
            self._meta("SH", {"name": exec_name, "value": hashes["exec"]}),
            orjson.dumps(start).decode(),
        ]

    def _end_line(self, cut: str | None = None) -> str:
        assert self._writer is not None
        decoder = self._writer.decoder
        args: dict[str, Any] = {
            "hhash": self.hhash,
            "p_idx": -1,
            "level": 1,
            "num_events": decoder.events + 1,  # as DFTracer counts: every complete event before `end`
            "dropped": decoder.dropped,
            "used": {"dynamo": 1},
        }
        if cut is not None:
            args["cut"] = cut
        args.update(self._ending(decoder))
        record = {
            "id": decoder.next_id, "name": "end", "cat": "dftracer", "pid": self.pid,
            "tid": threading.get_native_id(), "ts": time.time_ns() // 1000, "dur": 0, "ph": "X", "args": args,
        }  # fmt: skip
        return orjson.dumps(record).decode()

    def _ending(self, decoder: Decoder) -> dict[str, Any]:
        """What the end record says of how the program ended: the graph calls it was inside (`running`), the
        error that ended it (`exit_error`), and for an out-of-memory error `oom` and the memory then."""
        args: dict[str, Any] = {}
        error = self._error
        if error is not None and not isinstance(error, (KeyboardInterrupt, SystemExit)):
            running = decoder.running()
            if running:
                args["running"] = running
            text = str(error).strip().splitlines()
            args["exit_error"] = f"{type(error).__name__}: {text[0][:300] if text else ''}".rstrip(": ")
            if memory.is_out_of_memory(error):
                args["oom"] = 1
                rss = memory.resident_bytes()
                if rss is not None:
                    args["rss_at_end"] = rss
        if self._sampler is not None and self._sampler.error:
            args["memory_error"] = self._sampler.error  # why the memory track stopped or never started
        return args

    def _cut_line(self, signame: str, pending: list[dict], open_regions: list[dict]) -> str:
        assert self._writer is not None
        decoder = self._writer.decoder
        args = {"hhash": self.hhash, "signal": signame, "pending": pending, "open": open_regions}
        decoder.events += 1
        event_id = decoder.next_id
        decoder.next_id += 1
        record = {
            "id": event_id, "name": "cut", "cat": "dftracer", "pid": self.pid,
            "tid": threading.get_native_id(), "ts": time.time_ns() // 1000, "dur": 0, "ph": "X", "args": args,
        }  # fmt: skip
        return orjson.dumps(record, default=str).decode()


# -- the process's active session -----------------------------------------------------------------


def session(path: str | None = None, **options: Any) -> TraceSession:
    """Start tracing into `<path without .pfw/.pfw.gz>-<pid>.pfw[.gz]` and return the open session.

    Works as a context manager (`with dynascope.session("run.pfw.gz"): ...`) or on its own (call
    `.finalize()`, or let interpreter exit close it). Options: compression, compression_level,
    inline_args, record_shapes, flush_interval_s, disable_io, step_events, frame_events, device_time, memory,
    memory_interval_us, memory_step_kb (see
    TraceConfig);
    environment variables fill the rest.
    """
    config_fields = {k: options.pop(k) for k in list(options) if k in TraceConfig.__dataclass_fields__}
    data_dir = options.pop("data_dir", None)
    if options:
        raise SessionError(f"unknown session option(s): {', '.join(sorted(options))}")
    return TraceSession(path, config=TraceConfig.from_env(**config_fields), data_dir=data_dir).open()


def current_session() -> TraceSession | None:
    return _active


def ensure_session() -> TraceSession:
    """The active session, or a default one (announced once on stderr) when tracing starts without one."""
    with _active_lock:
        if _active is not None:
            return _active
        started = TraceSession(None, extension_decides=False)
        started.implicit = True
        started.open()
        print(
            f"dynascope: no trace session was started, so tracing into {started.path} "
            "(start one with dynascope.session(path) or dftracer.initialize_log(...) to choose the file)",
            file=sys.stderr,
        )
        return started


def child_spec() -> tuple | None:
    """What a child process started by spawn or forkserver needs to trace like this one (picklable):
    None when no session is open. A forked child needs nothing: it opens its own file at fork."""
    active = _active
    if active is None or active.closed:
        return None
    return (active.requested_path, active.config, active.data_dir, active.extension_decides)


def open_in_child(spec: tuple) -> TraceSession | None:
    """In a spawned child: open a session like the parent's (`child_spec`), into a file of its own, closed
    on the child's way out. The active session if there is one already (a forked child has)."""
    if _active is not None:
        return _active
    path, config, data_dir, extension_decides = spec
    child = TraceSession(path, config=config, data_dir=data_dir, extension_decides=extension_decides)
    try:
        child.open()
    except Exception as exc:  # noqa: BLE001 - the child runs on untraced rather than failing
        print(f"dynascope: the child process {os.getpid()} cannot trace: {exc}", file=sys.stderr)
        return None
    _register_multiprocessing_exit()
    return child


def _torch_side_events(action: str, session: TraceSession) -> None:
    """Install (or remove) the torch-side events that capture/ registered (trace/installers.py: the
    automatic training-step events, frame probes, GPU activity, collectives) where torch is already
    imported: this package stays torch-free, and a process without torch never loads them. A session
    opened before torch was imported gets them at the first compile."""
    if "torch" not in sys.modules:
        return
    for installer in installers.installers():
        if not installer.enabled(session.config):
            continue
        try:
            if action == "install":
                installer.install(session)
            else:
                installer.uninstall()
        except Exception as exc:  # noqa: BLE001 - the trace goes on without them, and says so
            print(f"dynascope: no {installer.what} ({type(exc).__name__}: {exc})", file=sys.stderr)


# -- exit, signals, fork --------------------------------------------------------------------------

_hooks_installed = False


def _finalize_active() -> None:
    active = _active
    if active is not None and active.pid == os.getpid() and not active.closed:
        # an uncaught exception in the main thread: the interpreter keeps it here before it exits
        error = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
        try:
            active.finalize(error)
        except Exception as exc:  # noqa: BLE001 - at exit, say it and move on
            print(f"dynascope: could not finish the trace: {exc}", file=sys.stderr)


_cut_reporters: list[Callable[[], list[dict]]] = []


def add_cut_reporter(fn: Callable[[], list[dict]]) -> None:
    """`fn()` is called when a signal cuts the trace short: the dicts it returns (op, pg, seq, bytes,
    source, issued_us: the collectives issued and not completed) go into the `cut` record's `pending`."""
    if fn not in _cut_reporters:
        _cut_reporters.append(fn)


_cut_lock = threading.Lock()


def _cut_active(signum: int, dying: bool) -> None:
    """Write the cut record and close the trace, once, whichever thread gets there first."""
    with _cut_lock:
        active = _active
        if active is None or active.pid != os.getpid() or active.closed:
            return
        try:
            active.cut(signal.Signals(signum).name, dying=dying)
        except Exception as exc:  # noqa: BLE001 - the process dies of its signal all the same
            print(f"dynascope: could not finish the trace: {exc}", file=sys.stderr)


def _die_of(signum: int) -> None:
    """Die of `signum` as the process would have without dynascope: default disposition, signal again.
    From a thread other than the main one the disposition is set through libc (Python allows
    signal.signal on the main thread only)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signum, signal.SIG_DFL)
    else:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.signal.restype = ctypes.c_void_p
            libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
            libc.signal(signum, None)  # SIG_DFL is 0
        except Exception:  # noqa: BLE001 - no libc to call: leave with the status a shell gives a signal
            os._exit(128 + signum)
    os.kill(os.getpid(), signum)
    time.sleep(1.0)  # the signal is delivered meanwhile
    os._exit(128 + signum)


def _on_sigterm(signum: int, frame: Any) -> None:
    previous = _previous_sigterm
    _cut_active(signum, dying=not callable(previous))
    if callable(previous):
        previous(signum, frame)
        return
    _die_of(signum)


_previous_sigterm: Any = None
_watch: tuple[int, int] | None = None  # the signal wakeup pipe (read end, write end) the watcher reads


def _watch_signals() -> None:
    """Python runs a signal handler only on the main thread between bytecodes, never while it is blocked in
    C (a collective waiting for another rank). The interpreter also writes each signal's number to the
    wakeup fd: a thread blocked on its read end closes the trace and dies of SIGTERM at once, as a
    process without dynascope would. Not where someone else set a wakeup fd (asyncio): then SIGTERM is
    handled on the main thread only, as before."""
    global _watch
    if _watch is not None or _previous_sigterm is not None:
        return  # the program's own SIGTERM handler decides, on the main thread
    read_end, write_end = os.pipe()
    try:
        os.set_blocking(write_end, False)
        previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    except (ValueError, OSError):
        os.close(read_end)
        os.close(write_end)
        return
    if previous != -1:  # someone else's: give it back
        signal.set_wakeup_fd(previous)
        os.close(read_end)
        os.close(write_end)
        return
    _watch = (read_end, write_end)
    threading.Thread(target=_watcher, args=(read_end,), name="dynascope-signals", daemon=True).start()


def _watcher(read_end: int) -> None:
    buffers.discard_this_thread()
    while True:
        try:
            data = os.read(read_end, 64)
        except OSError:
            return
        if not data:
            return
        if signal.SIGTERM in data and signal.getsignal(signal.SIGTERM) is _on_sigterm:
            _cut_active(signal.SIGTERM, dying=True)
            _die_of(signal.SIGTERM)


def _forget_watch_in_child() -> None:
    """A forked child must not write its signals into the parent's pipe."""
    global _watch
    if _watch is None:
        return
    try:
        signal.set_wakeup_fd(-1)
    except ValueError:
        pass
    for fd in _watch:
        try:
            os.close(fd)
        except OSError:
            pass
    _watch = None


def _after_fork_in_child() -> None:
    """A forked child writes its own file, named like the parent's but with its own pid."""
    global _active
    parent = _active
    _forget_watch_in_child()
    buffers.forget_after_fork()
    _active = None
    if parent is None or parent.closed:
        return
    child = TraceSession(parent.requested_path, config=parent.config, data_dir=parent.data_dir,
                         extension_decides=parent.extension_decides)  # fmt: skip
    try:
        child.open()
    except Exception as exc:  # noqa: BLE001 - the child runs on untraced rather than failing
        print(f"dynascope: the forked child {os.getpid()} cannot trace: {exc}", file=sys.stderr)
        return
    _register_multiprocessing_exit()


def _register_multiprocessing_exit() -> None:
    """multiprocessing children leave through os._exit, skipping atexit: use its own exit hook."""
    try:
        from multiprocessing import util
    except ImportError:
        return
    util.Finalize(None, _finalize_active, exitpriority=100)


def _mp_after_fork(_: object) -> None:
    # runs after multiprocessing cleared its finalizer registry in the child
    if _active is not None:
        _register_multiprocessing_exit()


def _install_exit_hooks() -> None:
    global _hooks_installed, _previous_sigterm
    if _hooks_installed:
        return
    _hooks_installed = True
    atexit.register(_finalize_active)
    os.register_at_fork(after_in_child=_after_fork_in_child)
    try:
        from multiprocessing import util

        util.register_after_fork(_mp_after_fork, _mp_after_fork)
    except ImportError:
        pass
    if threading.current_thread() is threading.main_thread():
        try:
            previous = signal.getsignal(signal.SIGTERM)
            if previous in (signal.SIG_DFL, None) or callable(previous):
                _previous_sigterm = previous if callable(previous) else None
                signal.signal(signal.SIGTERM, _on_sigterm)
                _watch_signals()
        except (ValueError, OSError):
            pass
