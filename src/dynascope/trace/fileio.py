"""Python file I/O events: every raw call of a file object opened while tracing records one event.

While installed (a session is open and DFTRACER_DISABLE_IO / DYNASCOPE_DISABLE_IO is not set),
`builtins.open` and `io.open` are `open` below. It builds exactly what CPython's `io.open` builds
(the same mode parsing, buffer size and classes: `type(open(p))` is still `io.TextIOWrapper`,
`io.BufferedReader`, ...) except that the raw layer under the buffer is `FileIO`, a subclass of
`io.FileIO` whose `__init__`, `readinto`, `read`, `readall`, `write` and `close` each record one
event: `("I", name, path, fd, ret, start_ns, end_ns)` through `buffers.emit`, with `name` one of
open/read/write/close. The buffered and text layers above are CPython's own, so what a program reads
and writes, and in which order, is unchanged; a traced `read` is one read(2) of the buffered layer
(or of the program, on an unbuffered binary file), not one `f.read()` of the program.

Anything unusual (a mode or argument CPython rejects, 3.10's deprecated "U" mode, a file argument
that is not a path or an int) goes to CPython's `_io.open` unchanged, so errors and warnings are
CPython's own (and such a file is not traced).

Not seen: files opened before `install()`, file objects built by other means (`io.FileIO(...)`
directly, `_io.open`, `io.open_code`, which imports use), reads and writes done outside Python file
objects (C extensions, `os.read`/`os.write`, mmap). docs/trace-format.md lists them.

The hot path is two clock readings and one `emit` per raw call; paths are resolved once per open,
and everything else happens in the writer thread (decode.py). With no session recording, a raw call
of a traced file costs one flag test.
"""

from __future__ import annotations

import _io
import builtins
import io
import itertools
import os
import sys
import threading
import warnings
from typing import Any

from dynascope.trace import buffers
from dynascope.trace.buffers import emit, now_ns

real_open: Any = _io.open  # the untouched open: dynascope's own files (the trace file) use it

_FileIO = _io.FileIO
_init = _FileIO.__init__
_readinto = _FileIO.readinto
_read = _FileIO.read
_readall = _FileIO.readall
_write = _FileIO.write
_fileno = _FileIO.fileno
_PY314 = sys.version_info >= (3, 14)
_MAX_BLKSIZE_3_14 = 8192 * 1024  # CPython 3.14 caps the default buffer at 8 MiB (and raises its floor)
_PROC_FD = "/proc/self/fd/"
_SEP = os.sep


def file_path(file: Any) -> str | None:
    """The absolute path a file argument names (str, bytes or path-like), or None.

    Relative paths are joined to the working directory as it is now; the writer thread normalises
    the result (decode.py), so it names the file as os.path.abspath would. Region args naming a file
    (decode.py's `__path`) can use it too.
    """
    try:
        path = os.fsdecode(os.fspath(file))
    except TypeError:
        return None
    if os.path.isabs(path):
        return path
    try:
        return os.path.join(os.getcwd(), path)
    except OSError:  # the working directory is gone: the open will say what is wrong, not us
        return path


def _fd_path(fd: int) -> str | None:
    """What an inherited file descriptor refers to (Linux: its /proc link), or None."""
    try:
        return os.readlink(_PROC_FD + str(fd))
    except (OSError, ValueError):
        return None


class FileIO(_FileIO):
    """`io.FileIO` recording one event per raw call (see the module docstring)."""

    __slots__ = ("_trace_fd", "_trace_path")

    def __init__(self, file: Any, mode: str = "r", closefd: bool = True, opener: Any = None) -> None:
        self._trace_fd = -1
        if type(file) is str and file.startswith(_SEP):
            path: str | None = file
        else:
            path = None if isinstance(file, int) else file_path(file)
        self._trace_path = path
        if not buffers._recording:
            _init(self, file, mode, closefd, opener)
            self._trace_fd = _fileno(self)
            if path is None:
                self._trace_path = _fd_path(self._trace_fd)
            return
        start = now_ns()
        try:
            _init(self, file, mode, closefd, opener)
        except BaseException:
            emit(("I", "open", path, -1, -1, start, now_ns()))
            raise
        end = now_ns()
        fd = self._trace_fd = _fileno(self)
        if path is None:
            path = self._trace_path = _fd_path(fd)
        emit(("I", "open", path, fd, fd, start, end))

    def readinto(self, buffer: Any, /) -> Any:
        if not buffers._recording:
            return _readinto(self, buffer)
        start = now_ns()
        try:
            n = _readinto(self, buffer)
        except BaseException:
            emit(("I", "read", self._trace_path, self._trace_fd, -1, start, now_ns()))
            raise
        emit(("I", "read", self._trace_path, self._trace_fd, n, start, now_ns()))
        return n

    def read(self, size: int | None = -1, /) -> Any:  # bytes, or None (non-blocking, nothing there)
        if not buffers._recording:
            return _read(self, size)
        start = now_ns()
        try:
            data = _read(self, size)
        except BaseException:
            emit(("I", "read", self._trace_path, self._trace_fd, -1, start, now_ns()))
            raise
        emit(("I", "read", self._trace_path, self._trace_fd, None if data is None else len(data), start, now_ns()))
        return data

    def readall(self) -> Any:
        if not buffers._recording:
            return _readall(self)
        start = now_ns()
        try:
            data: Any = _readall(self)  # None: non-blocking, nothing there
        except BaseException:
            emit(("I", "read", self._trace_path, self._trace_fd, -1, start, now_ns()))
            raise
        emit(("I", "read", self._trace_path, self._trace_fd, None if data is None else len(data), start, now_ns()))
        return data

    def write(self, data: Any, /) -> Any:  # int, or None (non-blocking, would block)
        if not buffers._recording:
            return _write(self, data)
        start = now_ns()
        try:
            n = _write(self, data)
        except BaseException:
            emit(("I", "write", self._trace_path, self._trace_fd, -1, start, now_ns()))
            raise
        emit(("I", "write", self._trace_path, self._trace_fd, n, start, now_ns()))
        return n

    def close(self) -> None:
        # Also called by the finaliser of an unreferenced file, possibly late in interpreter
        # shutdown: it must not fail when tracing is gone.
        try:
            traced = buffers._recording and self.closefd and not self.closed
        except Exception:  # noqa: BLE001 - never let tracing break a close
            traced = False
        if not traced:
            self._close()
            return
        start = now_ns()
        try:
            self._close()
        except BaseException:
            emit(("I", "close", self._trace_path, self._trace_fd, -1, start, now_ns()))
            raise
        emit(("I", "close", self._trace_path, self._trace_fd, 0, start, now_ns()))

    _close = _FileIO.close  # a class attribute, not a module global: still there late in shutdown


def _mode_table() -> dict[str, tuple[str, Any, bool]]:
    """Every mode string CPython's open accepts -> (the raw FileIO mode, the buffered class, binary).

    One of x/r/w/a, an optional "+", an optional "t" or "b", each at most once, in any order.
    """
    table: dict[str, tuple[str, Any, bool]] = {}
    for main in "xrwa":
        for plus in ("", "+"):
            buffered = io.BufferedRandom if plus else io.BufferedReader if main == "r" else io.BufferedWriter
            for kind in ("", "t", "b"):
                for chars in itertools.permutations(main + plus + kind):
                    table["".join(chars)] = (main + plus, buffered, kind == "b")
    return table


_MODES = _mode_table()


def _open(
    file: Any,
    mode: Any = "r",
    buffering: Any = -1,
    encoding: Any = None,
    errors: Any = None,
    newline: Any = None,
    closefd: Any = True,
    opener: Any = None,
) -> Any:
    """`io.open`, with the raw layer recording I/O events (CPython's dispatch, as in `_pyio.open`)."""
    parsed = _MODES.get(mode) if type(mode) is str else None
    if (
        parsed is None
        or not isinstance(buffering, int)
        or not isinstance(closefd, int)
        or (encoding is not None and (parsed[2] or type(encoding) is not str or "\0" in encoding))
        or (errors is not None and (parsed[2] or type(errors) is not str or "\0" in errors))
        or (newline is not None and (parsed[2] or type(newline) is not str or "\0" in newline))
        or (buffering == 0 and not parsed[2])
    ):
        # an invalid mode, binary with text arguments, unbuffered text, an argument of the wrong
        # type: CPython says what is wrong (or, where it accepts more than we check, does it)
        return real_open(file, mode, buffering, encoding, errors, newline, closefd, opener)
    if type(file) is str or isinstance(file, int):
        path_or_fd: Any = file
    else:
        try:
            path_or_fd = os.fspath(file)
        except TypeError:
            return real_open(file, mode, buffering, encoding, errors, newline, closefd, opener)
    rawmode, buffered, binary = parsed
    if binary and buffering == 1:
        warnings.warn(
            "line buffering (buffering=1) isn't supported in binary mode, the default buffer size will be used",
            RuntimeWarning,
            stacklevel=2,
        )
    raw: Any = FileIO(path_or_fd, rawmode, bool(closefd), opener)
    result: Any = raw
    try:
        line_buffering = False
        if buffering == 1 or (buffering < 0 and (raw._isatty_open_only() if _PY314 else raw.isatty())):
            buffering = -1
            line_buffering = True
        if buffering < 0:  # st_blksize (else io.DEFAULT_BUFFER_SIZE), from 3.14 within bounds
            buffering = max(min(raw._blksize, _MAX_BLKSIZE_3_14), io.DEFAULT_BUFFER_SIZE) if _PY314 else raw._blksize
        if buffering < 0:
            raise ValueError("invalid buffering size")
        if buffering == 0:
            return result  # binary: checked above
        result = buffered(raw, buffering)
        if binary:
            return result
        if encoding is None:
            encoding = _io.text_encoding(None, 2)  # an EncodingWarning (-X warn_default_encoding) names our caller
        text_file = io.TextIOWrapper(result, encoding, errors, newline, line_buffering)
        result = text_file
        text_file.mode = mode  # type: ignore[misc]  # as CPython's open sets it
        return text_file
    except BaseException:
        result.close()
        raise


_open.__doc__ = real_open.__doc__
_open.__name__ = _open.__qualname__ = "open"
_open.__annotations__ = {}  # inspect.signature(open) reads as CPython's
# A staticmethod object (callable since 3.10), not a plain function: like the builtin it replaces, it
# does not turn into a bound method when a class stores it (`class Accessor: open = io.open`).
open = staticmethod(_open)

# -- install / uninstall -------------------------------------------------------------------------

_lock = threading.Lock()
_saved: dict[tuple[Any, str], Any] | None = None  # (namespace, name) -> what install() replaced there


def installed() -> bool:
    return _saved is not None


def _patch_points() -> list[tuple[Any, str]]:
    """Where `open` is looked up at call time: builtins.open, io.open, and on 3.10 pathlib's own copy
    (`_NormalAccessor.open = io.open`, taken when pathlib was imported)."""
    points: list[tuple[Any, str]] = [(builtins, "open"), (io, "open")]
    pathlib = sys.modules.get("pathlib")
    accessor = getattr(pathlib, "_NormalAccessor", None)
    if accessor is not None and "open" in vars(accessor):
        points.append((accessor, "open"))
    return points


def install() -> None:
    """Make `open` / `io.open` the tracing open (idempotent). Not on Windows (console files)."""
    global _saved
    if sys.platform == "win32":
        return
    with _lock:
        if _saved is not None:
            return
        saved = {}
        for namespace, name in _patch_points():
            current = vars(namespace)[name]
            if current is real_open or namespace is builtins or namespace is io:
                saved[namespace, name] = current
                setattr(namespace, name, open)
        _saved = saved


def uninstall() -> None:
    """Put back what install() replaced (idempotent). A patch someone made on top of ours stays.

    A copy of the tracing open taken while it was installed (pathlib imported during a session on
    3.10) goes back to CPython's open too; any other copy keeps working, recording only while a
    session does.
    """
    global _saved
    with _lock:
        if _saved is None:
            return
        saved, _saved = _saved, None
        for namespace, name in _patch_points():
            if vars(namespace).get(name) is open:
                setattr(namespace, name, saved.get((namespace, name), real_open))


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # a thread of the parent may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)
