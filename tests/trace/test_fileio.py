"""Python file I/O events (trace/fileio.py), on real files: what a program reads and writes is the same
traced and untraced, and the events count the raw calls and their bytes. Torch-free."""

from __future__ import annotations

import _io
import builtins
import io
import json
import os
import pathlib
import subprocess
import sys
import threading
import warnings
from collections import defaultdict

import pytest
from support.tracecheck import check, load

from dynascope.trace import fileio
from dynascope.trace.config import TraceConfig
from dynascope.trace.decode import Decoder, ThreadStream
from dynascope.trace.hashing import hash16
from dynascope.trace.regions import region
from dynascope.trace.session import TraceSession

PAYLOAD = "".join(f"line {i}: {'é' * (i % 7)} {'x' * (i % 50)}\n" for i in range(2000))  # ~70 kB, multi-byte
BINARY = bytes(range(256)) * 300  # 76.8 kB


def traced(tmp_path, fn, **config):
    """Run fn() inside a session writing tmp_path/trace-<pid>.pfw; return (fn's result, the trace's records)."""
    session = TraceSession(str(tmp_path / "trace.pfw"), config=TraceConfig(compression=False, **config)).open()
    try:
        result = fn()
    finally:
        session.finalize()
    records = load(session.path)
    check(records)
    return result, records


def io_events(records) -> dict[str, list[dict]]:
    """POSIX events by file path (through their FH records, which must come first)."""
    paths = {}
    by_path = defaultdict(list)
    for record in records:
        if record["name"] == "FH":
            paths[record["args"]["value"]] = record["args"]["name"]
        elif record.get("cat") == "POSIX":
            fhash = record["args"].get("fhash")
            assert fhash is None or fhash in paths, f"an event before its file's FH record: {record}"
            by_path[paths.get(fhash)].append(record)
    return by_path


def names(events) -> list[str]:
    return [e["name"] for e in events]


def read_bytes(events) -> int:
    return sum(e["args"]["ret"] for e in events if e["name"] == "read")


def written_bytes(events) -> int:
    return sum(e["args"]["ret"] for e in events if e["name"] == "write")


def both_ways(tmp_path, work):
    """work(directory) run untraced in one directory and traced in another: both results, and the trace."""
    plain_dir, traced_dir = tmp_path / "plain", tmp_path / "traced"
    plain_dir.mkdir()
    traced_dir.mkdir()
    plain = work(plain_dir)
    result, records = traced(tmp_path, lambda: work(traced_dir))
    return plain, result, records, traced_dir


def describe(f) -> tuple:
    """What a file object is, CPython-wise: its types, mode, encoding and buffer size."""
    buffer = getattr(f, "buffer", f)
    text = (f.encoding, f.errors, f.line_buffering, f.mode) if isinstance(f, io.TextIOWrapper) else ()
    raw = getattr(buffer, "raw", buffer)
    return (type(f), type(buffer), buffer.__sizeof__(), raw.mode, raw.closefd, *text)


# ---------------------------------------------------------------------------- contents and objects


def text_workload(directory: pathlib.Path) -> list:
    out: list = []
    path = directory / "data.txt"
    with open(path, "w") as f:
        out.append(describe(f))
        f.write(PAYLOAD[:1000])
        f.writelines(PAYLOAD[1000:].splitlines(keepends=True))
    with open(path, "a", encoding="utf-8") as f:
        out.append(describe(f))
        f.write("appended\r\nline\rend\n")
    with open(path) as f:
        out.append(describe(f))
        out.append(f.readline())
        out.append(f.read(100))
        out.append(list(f))
    with open(path, encoding="utf-8", newline="") as f:  # line ends untranslated
        out.append(describe(f))
        out.append(f.readlines()[-3:])
        out.append(f.newlines)
    with open(path, "r+", encoding="latin-1", errors="replace") as f:
        out.append(describe(f))
        out.append(f.read(50))
        f.seek(0)
        f.write("REPLACED")
        f.seek(0)
        out.append(f.readline())
    with open(path, "w+", newline="\r\n") as f:
        out.append(describe(f))
        f.write("a\nb\n")
        f.seek(0)
        out.append(f.read())
    with open(directory / "new.txt", "x") as f:
        out.append(describe(f))
        f.write("created")
    with pytest.raises(FileExistsError):
        open(directory / "new.txt", "x")  # noqa: SIM115 - it must fail
    with open(path, "a+") as f:
        out.append(describe(f))
        f.write("more")
        f.seek(0)
        out.append(len(f.read()))
    out.append((directory / "new.txt").read_text())
    return out


def test_text_files_read_and_write_the_same_and_are_the_same_objects(tmp_path):
    plain, got, records, directory = both_ways(tmp_path, text_workload)
    assert got == plain
    by_path = io_events(records)
    data = by_path[str(directory / "data.txt")]
    assert names(data).count("open") == names(data).count("close") == 7
    size = (directory / "data.txt").stat().st_size
    assert read_bytes(data) > size and written_bytes(data) > size  # several passes over it
    created = by_path[str(directory / "new.txt")]
    # open, write, close; the refused "x" open (ret -1); read_text: open, one read (readall), close
    assert names(created) == ["open", "write", "close", "open", "open", "read", "close"]
    assert created[3]["args"]["ret"] == -1 and created[3]["args"]["fd"] == -1
    assert read_bytes(created) == written_bytes(created) == len("created")


def binary_workload(directory: pathlib.Path) -> list:
    out: list = []
    path = directory / "data.bin"
    with open(path, "wb") as f:
        out.append(describe(f))
        for k in range(0, len(BINARY), 1000):
            f.write(BINARY[k : k + 1000])
    with open(path, "rb") as f:
        out.append(describe(f))
        out.append(f.read(10))
        out.append(f.peek(5)[:5])
        out.append(f.read1(20))
        chunk = bytearray(4096)
        out.append((f.readinto(chunk), bytes(chunk)))
        out.append(f.read())
    with open(path, "r+b") as f:
        out.append(describe(f))
        f.seek(100)
        f.write(b"patched")
        f.seek(90)
        out.append(f.read(30))
    with open(path, "ab") as f:
        out.append(describe(f))
        f.write(b"tail")
    with open(directory / "x.bin", "xb") as f:
        f.write(b"x" * 10)
    with open(path, "a+b", buffering=64) as f:
        out.append(describe(f))
        f.seek(0)
        out.append(f.read(100))
    out.append((directory / "data.bin").read_bytes()[-10:])
    return out


def test_binary_files_read_and_write_the_same_and_bytes_add_up(tmp_path):
    plain, got, records, directory = both_ways(tmp_path, binary_workload)
    assert got == plain
    data = io_events(records)[str(directory / "data.bin")]
    assert names(data).count("open") == names(data).count("close") == 6
    assert written_bytes(data) == len(BINARY) + len(b"patched") + len(b"tail")
    x = io_events(records)[str(directory / "x.bin")]
    assert names(x) == ["open", "write", "close"] and written_bytes(x) == 10


def test_unbuffered_binary_is_one_event_per_call_with_its_bytes(tmp_path):
    path = tmp_path / "raw.bin"

    def work():
        out = []
        with open(path, "wb", buffering=0) as f:
            out.append(type(f))
            for k in range(10):
                out.append(f.write(bytes([k]) * (k + 1)))
        with open(path, "rb", buffering=0) as f:
            out.append(f.read(3))
            out.append(f.readinto(bytearray(4)))
            out.append(f.readall())
            out.append(f.read(5))  # at EOF
        return out

    got, records = traced(tmp_path, work)
    assert got[0] is fileio.FileIO
    events = io_events(records)[str(path)]
    assert names(events) == ["open", *["write"] * 10, "close", "open", "read", "read", "read", "read", "close"]
    assert [e["args"]["ret"] for e in events if e["name"] in ("read", "write")] == [*range(1, 11), 3, 4, 48, 0]
    fds = {e["args"]["fd"] for e in events}
    assert len(fds) == 1 and fds.pop() >= 0  # fd reused after the first close
    assert events[0]["args"]["ret"] == events[0]["args"]["fd"]


def test_line_iteration_readline_and_with_blocks_count_raw_reads_not_lines(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_text(PAYLOAD, encoding="utf-8")
    size = path.stat().st_size

    def work():
        with open(path, encoding="utf-8") as f:
            lines = list(f)  # line iteration
        with open(path, encoding="utf-8") as f:
            first = [f.readline() for _ in range(5)]
        return lines, first

    (lines, first), records = traced(tmp_path, work)
    assert "".join(lines) == PAYLOAD and first == PAYLOAD.splitlines(keepends=True)[:5]
    events = io_events(records)[str(path)]
    reads = [e for e in events if e["name"] == "read"]
    assert len(reads) < len(lines) / 10  # buffered: a read(2) per buffer, not per line
    assert read_bytes(events[: names(events).index("close") + 1]) == size  # the whole file, once
    assert names(events).count("close") == 2


def test_pathlib_and_int_fds(tmp_path):
    path = tmp_path / "p.bin"

    def work():
        path.write_bytes(BINARY)
        (tmp_path / "p.txt").write_text("text", encoding="utf-8")
        fd = os.open(path, os.O_RDONLY)
        with open(fd, "rb") as f:  # closes fd
            data = f.read()
        fd = os.open(path, os.O_RDONLY)
        with os.fdopen(fd, "rb", closefd=False) as f:
            head = f.read(4)
        os.close(fd)
        return data, head, (tmp_path / "p.txt").read_text(encoding="utf-8")

    (data, head, text), records = traced(tmp_path, work)
    assert data == BINARY and head == BINARY[:4] and text == "text"
    events = io_events(records)[str(path)]  # the fd's path, from /proc/self/fd
    # closefd=False: no close
    assert names(events) == ["open", "write", "close", "open", "read", "close", "open", "read"]
    assert written_bytes(events) == read_bytes(events[:6]) == len(BINARY)
    assert events[-1]["args"]["ret"] == min(len(BINARY), os.stat(path).st_blksize)  # f.read(4) fills the buffer
    assert events[3]["args"]["fd"] == events[4]["args"]["fd"] == events[3]["args"]["ret"]
    assert names(io_events(records)[str(tmp_path / "p.txt")]) == ["open", "write", "close", "open", "read", "close"]


def test_relative_paths_are_recorded_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _, records = traced(tmp_path, lambda: pathlib.Path("rel.txt").write_text("r", encoding="utf-8"))
    assert str(tmp_path / "rel.txt") in io_events(records)


def test_fh_records_once_per_path_before_the_first_event(tmp_path):
    path = tmp_path / "once.txt"

    def work():
        for _ in range(3):
            path.write_text("abc", encoding="utf-8")

    _, records = traced(tmp_path, work)
    fh = [r for r in records if r["name"] == "FH" and r["args"]["name"] == str(path)]
    assert len(fh) == 1 and fh[0]["args"]["value"] == hash16(str(path))
    first = next(
        i for i, r in enumerate(records) if r.get("cat") == "POSIX" and r["args"]["fhash"] == hash16(str(path))
    )
    assert records.index(fh[0]) < first
    events = io_events(records)[str(path)]
    assert names(events) == ["open", "write", "close"] * 3
    assert all(set(e["args"]) == {"hhash", "p_idx", "level", "fhash", "fd", "ret"} for e in events)


def test_io_events_nest_in_regions_and_keep_their_thread(tmp_path):
    path = tmp_path / "t.txt"

    def in_thread():
        with open(path, "w", encoding="utf-8") as f:
            f.write("from a thread")

    def work():
        with region("load", cat="test"):
            thread = threading.Thread(target=in_thread, name="loader")
            thread.start()
            thread.join()
            with open(path, encoding="utf-8") as f:
                return f.read()

    text, records = traced(tmp_path, work)
    assert text == "from a thread"
    events = io_events(records)[str(path)]
    load_region = next(r for r in records if r["name"] == "load")
    writer_side = [e for e in events if e["tid"] != load_region["tid"]]
    reader_side = [e for e in events if e["tid"] == load_region["tid"]]
    assert names(writer_side) == ["open", "write", "close"] and names(reader_side) == ["open", "read", "close"]
    assert all(e["args"]["p_idx"] == load_region["id"] and e["args"]["level"] == 2 for e in reader_side)
    assert all(e["args"]["p_idx"] == -1 for e in writer_side)
    assert any(r["name"] == "thread_name" and r["args"]["name"] == "loader" for r in records)


# ---------------------------------------------------------------------------- CPython's errors, our own files


BAD_CALLS = [
    ("rw", {}),
    ("rr", {}),
    ("rq", {}),
    ("", {}),
    ("+", {}),
    ("tb", {}),
    ("b", {}),
    ("r\0", {}),
    ("rb", {"encoding": "utf-8"}),
    ("rb", {"errors": "strict"}),
    ("rb", {"newline": "\n"}),
    ("r", {"buffering": 0}),
    ("r", {"newline": "x"}),
    ("r", {"encoding": "no-such-codec"}),
    ("r", {"encoding": 5}),
    (5, {}),
    ("r", {"buffering": "x"}),
    ("w", {"closefd": False}),
    ("r", {"opener": lambda path, flags: -1}),
]


@pytest.mark.parametrize(("mode", "kwargs"), BAD_CALLS)
def test_what_cpython_refuses_raises_the_same_error(tmp_path, mode, kwargs):
    path = tmp_path / "exists.txt"
    path.write_text("x", encoding="utf-8")
    with pytest.raises(Exception) as real:  # noqa: PT011 - whatever CPython raises
        _io.open(path, mode, **kwargs)
    fileio.install()
    try:
        with pytest.raises(Exception) as ours:  # noqa: PT011
            open(path, mode, **kwargs)  # noqa: SIM115 - it must fail
    finally:
        fileio.uninstall()
    assert type(ours.value) is type(real.value) and str(ours.value) == str(real.value)
    assert path.read_text(encoding="utf-8") == "x"


@pytest.mark.filterwarnings("ignore:'U' mode is deprecated")  # 3.10 still takes it, with this warning
def test_the_modes_we_build_are_exactly_those_cpython_accepts(tmp_path):
    path = tmp_path / "m.txt"
    path.write_text("m", encoding="utf-8")
    chars = "xrwa+tbU"
    modes = ["", *chars]
    for _ in range(3):
        modes += [m + c for m in modes if len(m) == len(modes[-1]) for c in chars]
    for mode in set(modes):
        try:
            _io.open(path, mode).close()
            accepted = True
        except ValueError:
            accepted = False
        except FileExistsError:
            accepted = True
        if "U" in mode and sys.version_info < (3, 11):
            assert mode not in fileio._MODES  # 3.10's deprecated "U": CPython's open, untraced
            continue
        assert (mode in fileio._MODES) == accepted, mode


def test_bad_file_arguments_raise_the_same_error(tmp_path):
    files = [None, 3.5, object(), tmp_path / "missing" / "f.txt", str(tmp_path / "a\0b"), tmp_path, b"/no/such"]

    def outcome(open_function, file):
        try:
            open_function(file).close()
        except Exception as exc:  # noqa: BLE001 - the error is what is compared
            return type(exc), str(exc)
        return None

    real = [outcome(_io.open, file) for file in files]
    ours, records = traced(tmp_path, lambda: [outcome(open, file) for file in files])
    assert ours == real and all(real)
    failed = [e for e in records if e.get("cat") == "POSIX"]
    assert names(failed) == ["open"] * 4 and {e["args"]["ret"] for e in failed} == {-1}  # the paths FileIO tried


def test_a_relative_open_in_a_deleted_working_directory_fails_as_cpythons(tmp_path, monkeypatch):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    with pytest.raises(FileNotFoundError) as real:
        _io.open("f.txt", "w")
    fileio.install()
    try:
        with pytest.raises(FileNotFoundError) as ours:
            open("f.txt", "w")  # noqa: SIM115 - it must fail
    finally:
        fileio.uninstall()
    assert type(ours.value) is type(real.value) and str(ours.value) == str(real.value)


def test_binary_line_buffering_warns_as_cpython_does(tmp_path):
    path = tmp_path / "w.bin"
    with warnings.catch_warnings(record=True) as real:
        warnings.simplefilter("always")
        _io.open(path, "wb", buffering=1).close()
    fileio.install()
    try:
        with warnings.catch_warnings(record=True) as ours:
            warnings.simplefilter("always")
            f = open(path, "wb", buffering=1)  # noqa: SIM115 - closed at once, inside the warnings check
            f.close()
    finally:
        fileio.uninstall()
    assert [(w.category, str(w.message), w.filename) for w in ours] == [
        (w.category, str(w.message), w.filename) for w in real
    ]
    assert ours[0].filename == __file__


def test_install_and_uninstall_are_idempotent_and_restore_cpythons_open():
    assert builtins.open is io.open is _io.open
    fileio.install()
    fileio.install()
    assert builtins.open is io.open is fileio.open
    fileio.uninstall()
    fileio.uninstall()
    assert builtins.open is io.open is _io.open


def test_uninstall_leaves_a_later_patch_alone():
    def other(*args, **kwargs):
        return _io.open(*args, **kwargs)

    fileio.install()
    builtins.open = other
    try:
        fileio.uninstall()
        assert builtins.open is other and io.open is _io.open
    finally:
        builtins.open = _io.open


def test_a_class_that_stores_open_while_installed_calls_it_as_a_function(tmp_path):
    def work():
        class Accessor:  # as pathlib's _NormalAccessor does on 3.10 (`open = io.open`)
            open = io.open

        with Accessor().open(tmp_path / "c.txt", "w", encoding="utf-8") as f:
            f.write("c")
        return pathlib.Path(tmp_path / "c.txt").read_text(encoding="utf-8")

    text, records = traced(tmp_path, work)
    assert text == "c"
    assert names(io_events(records)[str(tmp_path / "c.txt")]) == ["open", "write", "close", "open", "read", "close"]
    accessor = getattr(pathlib, "_NormalAccessor", None)  # 3.10: pathlib's copy is CPython's open again
    assert accessor is None or vars(accessor)["open"] is _io.open


def test_a_session_installs_on_open_and_uninstalls_on_finalize(tmp_path):
    session = TraceSession(str(tmp_path / "s.pfw"), config=TraceConfig(compression=False)).open()
    try:
        assert builtins.open is io.open is fileio.open
    finally:
        session.finalize()
    assert builtins.open is io.open is _io.open


def test_the_trace_file_and_the_writer_thread_record_nothing(tmp_path):
    path = tmp_path / "mine.txt"

    def work():
        for _ in range(3):
            path.write_text("x", encoding="utf-8")
        return fileio.installed()

    was_installed, records = traced(tmp_path, work, flush_interval_s=0.01)
    assert was_installed
    files = {r["args"]["name"] for r in records if r["name"] == "FH"}
    assert str(path) in files
    assert not any(name.endswith((".pfw", ".pfw.gz")) for name in files)
    assert {r["tid"] for r in records if r.get("cat") == "POSIX"} == {threading.get_native_id()}
    thread_names = {r["args"]["name"] for r in records if r["name"] == "thread_name"}
    assert "dynascope-writer" not in thread_names  # numba's cache files, loaded by the writer thread


def test_disable_io_removes_exactly_the_io_events(tmp_path, monkeypatch):
    def work(directory):
        def run():
            for k in range(3):
                with region("step", step=k):
                    (directory / f"{k}.txt").write_text(str(k) * 100, encoding="utf-8")
                    with open(directory / f"{k}.txt", encoding="utf-8") as f:
                        f.read()

        return run

    (tmp_path / "on").mkdir()
    (tmp_path / "off").mkdir()
    _, with_io = traced(tmp_path / "on", work(tmp_path / "on"))
    monkeypatch.setenv("DFTRACER_DISABLE_IO", "1")
    config = TraceConfig.from_env(compression=False)
    assert config.disable_io
    session = TraceSession(str(tmp_path / "off" / "trace.pfw"), config=config).open()
    try:
        assert builtins.open is _io.open
        work(tmp_path / "off")()
    finally:
        session.finalize()
    without_io = load(session.path)
    check(without_io)

    def shape(records, keep_io):
        return [
            (r["name"], r.get("cat"))
            for r in records
            if r["ph"] == "X" and (keep_io or r["cat"] != "POSIX") and r["name"] not in ("start", "end")
        ]

    assert not [r for r in without_io if r.get("cat") == "POSIX"]
    assert shape(with_io, False) == shape(without_io, True)
    assert len([r for r in with_io if r.get("cat") == "POSIX"]) == 3 * 6  # open write close open read close
    assert with_io[-1]["args"]["num_events"] - without_io[-1]["args"]["num_events"] == 18


def test_files_opened_during_a_session_work_after_it(tmp_path):
    path = tmp_path / "late.txt"
    path.write_text("abc\n" * 10000, encoding="utf-8")
    holder = {}

    def work():
        holder["f"] = open(path, encoding="utf-8")  # noqa: SIM115 - used after the session
        return holder["f"].readline()

    first, records = traced(tmp_path, work)
    rest = holder["f"].read()
    holder["f"].close()
    assert first + rest == path.read_text(encoding="utf-8")
    assert names(io_events(records)[str(path)]) == ["open", "read"]


def test_a_forked_child_records_its_own_io(tmp_path):
    if not hasattr(os, "fork"):
        pytest.skip("no fork")
    path = tmp_path / "child.txt"

    def work():
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                from dynascope.trace import session as session_module

                path.write_text("child", encoding="utf-8")
                child = session_module.current_session()
                code = 0 if child is not None and fileio.installed() and builtins.open is fileio.open else 2
                child.finalize()
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        return pid, status

    (pid, status), records = traced(tmp_path, work)
    assert status == 0
    assert str(path) not in io_events(records)  # the parent did not write it
    child_records = load(str(tmp_path / f"trace-{pid}.pfw"))
    check(child_records)
    by_path = io_events(child_records)
    assert names(by_path[str(path)]) == ["open", "write", "close"]
    assert list(by_path) == [str(path)]  # not its own trace file, opened while the parent's patch was in place


# ---------------------------------------------------------------------------- the decoder


def decode(decoder, records):
    """Decode side records (as the hot path leaves them) into the lines the writer would write."""
    from dynascope.trace.buffers import MARK

    side = [(n + 1, record) for n, record in enumerate(records)]
    ints = [MARK - n for n, _ in side]
    lines: list[bytes] = []

    def take(last):
        taken = [entry for entry in side if entry[0] <= last]
        del side[: len(taken)]
        return taken

    decoder.decode(ThreadStream(tid=7), ints, take, True, lambda data: lines.append(bytes(data)))
    return [json.loads(line) for piece in lines for line in piece.splitlines()]


def test_decoder_io_records_and_region_paths():
    decoder = Decoder(pid=1, hhash="0" * 16, offset_ns=0, inline_args=False)
    got = decode(decoder, [
        ("B", "torch.load", "torch.io", {"__path": "/data/a.pt", "bytes": 12}, 1_000),
        ("I", "open", "/data/a.pt", 5, 5, 2_000, 3_000),
        ("I", "read", "/data/a.pt", 5, 12, 4_000, 6_000),
        ("I", "read", "/data/a.pt", 5, None, 7_000, 8_000),
        ("E", 9_000),
        ("I", "write", None, 9, 3, 10_000, 11_000),
        ("B", "torch.save", "torch.io", {"__path": pathlib.Path("/data/b.pt")}, 12_000),
        ("E", 13_000),
        ("B", "torch.save", "torch.io", {"__path": None, "bytes": 1}, 14_000),
        ("E", 15_000),
    ])  # fmt: skip
    fh = [r for r in got if r["name"] == "FH"]
    assert [r["args"]["name"] for r in fh] == ["/data/a.pt", "/data/b.pt"]
    a, b = hash16("/data/a.pt"), hash16("/data/b.pt")
    events = [r for r in got if r["ph"] == "X"]
    assert [(e["name"], e["cat"]) for e in events] == [
        ("open", "POSIX"), ("read", "POSIX"), ("read", "POSIX"), ("torch.load", "torch.io"),
        ("write", "POSIX"), ("torch.save", "torch.io"), ("torch.save", "torch.io"),
    ]  # fmt: skip
    load_event = events[3]
    assert load_event["args"]["fhash"] == a and load_event["args"]["bytes"] == 12 and "__path" not in load_event["args"]
    assert [e["args"]["p_idx"] for e in events[:3]] == [load_event["id"]] * 3
    assert [e["args"]["ret"] for e in events[:3]] == [5, 12, -1]  # None: nothing there (non-blocking)
    assert events[1]["dur"] == 2 and events[1]["args"]["fd"] == 5
    assert "fhash" not in events[4]["args"] and events[4]["args"]["fd"] == 9
    assert events[5]["args"]["fhash"] == b
    assert set(events[6]["args"]) == {"hhash", "p_idx", "level", "bytes"}
    assert got.index(fh[0]) < got.index(events[0]) and got.index(fh[1]) < got.index(events[5])


def test_one_file_under_two_spellings_is_one_fh_record():
    decoder = Decoder(pid=1, hhash="0" * 16, offset_ns=0, inline_args=False)
    got = decode(decoder, [
        ("I", "open", "/data/./a.pt", 5, 5, 1_000, 2_000),
        ("I", "read", "/data/./a.pt", 5, 9, 2_000, 3_000),
        ("B", "torch.load", "torch.io", {"__path": "/data/a.pt"}, 4_000),
        ("I", "open", "/data/x/../a.pt", 6, 6, 5_000, 6_000),
        ("E", 7_000),
    ])  # fmt: skip
    assert [r["args"]["name"] for r in got if r["name"] == "FH"] == ["/data/a.pt"]
    assert {r["args"]["fhash"] for r in got if r["ph"] == "X"} == {hash16("/data/a.pt")}


def test_file_path_makes_paths_absolute_without_touching_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert fileio.file_path("a/../b.txt") == os.path.join(str(tmp_path), "a/../b.txt")
    assert fileio.file_path(b"/x/y") == "/x/y"
    assert fileio.file_path(pathlib.Path("/x/z")) == "/x/z"
    assert fileio.file_path(3) is None and fileio.file_path(object()) is None


def test_an_encoding_warning_names_the_callers_line(tmp_path):
    script = tmp_path / "warns.py"
    script.write_text(
        "import _io, warnings\n"
        "from dynascope.trace import fileio\n"
        "def lines(open_function):\n"
        "    with warnings.catch_warnings(record=True) as caught:\n"
        "        warnings.simplefilter('always')\n"
        "        open_function(__file__).close()\n"
        "    return [(w.category.__name__, str(w.message), w.filename, w.lineno) for w in caught]\n"
        "real = lines(_io.open)\n"
        "fileio.install()\n"
        "ours = lines(open)\n"
        "assert ours == real and real, (ours, real)\n",
        encoding="utf-8",
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run(
        [sys.executable, "-X", "warn_default_encoding", str(script)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
