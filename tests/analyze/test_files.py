"""by_file: the per-file I/O table (analyze/files.py) from POSIX and torch.io events (tests/support/step_trace.py)."""

from __future__ import annotations

import warnings

import polars as pl
from polars.testing import assert_frame_equal
from support import step_trace as st
from support.trace_fixtures import GEN_A

import dynascope.analyze.partial as P
import dynascope.analyze.partial_build as PB
import dynascope.analyze.read.lines as _lines
from dynascope.analyze import fastpath
from dynascope.analyze.files import BY_FILE_COLUMNS, file_table
from dynascope.analyze.pipeline import finish, merge, summarize, summarize_files
from dynascope.analyze.read import _inflate
from dynascope.analyze.read.reader import read_trace


def _summary(paths):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return summarize_files(paths)


def _rows(summary) -> dict:
    return {r["fname"]: r for r in summary.by_file.iter_rows(named=True)}


def _training(tmp_path, steps: int = 8) -> list:
    tr, _ = st.training_trace(steps=steps, save_after=3)
    paths = [tr.write(tmp_path / "train-4242.pfw.gz", gz=True, per_member=33)]
    for w in range(2):
        worker = st.worker_trace(5000 + w, 4242, w, list(range(w, steps, 2)), st.T0)
        paths.append(worker.write(tmp_path / f"train-{5000 + w}.pfw"))
    return paths


def test_training_files(tmp_path):
    """A checkpoint saved by the main process, one sample read by a worker per batch."""
    s = _summary(_training(tmp_path))
    rows = _rows(s)
    assert list(s.by_file.columns) == list(BY_FILE_COLUMNS)
    assert set(rows) == {"/tmp/run/ckpt-3.pt", *(f"/data/sample-{b}.pt" for b in range(8))}
    ckpt = rows["/tmp/run/ckpt-3.pt"]
    # torch.save of 4096 bytes with its two 2048-byte writes inside: the bytes count once
    assert (ckpt["saves"], ckpt["save_us"], ckpt["writes"], ckpt["bytes_written"], ckpt["io_us"]) == (1, 30, 2, 4096, 10)
    assert (ckpt["total_us"], ckpt["processes"], ckpt["workers"], ckpt["events"]) == (30, 1, 0, 3)
    sample = rows["/data/sample-5.pt"]
    assert (sample["reads"], sample["bytes_read"], sample["io_us"], sample["total_us"]) == (1, 512, 10, 10)
    assert (sample["processes"], sample["workers"], sample["compile_events"], sample["compile_us"]) == (1, 1, 0, 0)
    assert s.by_file.row(0, named=True)["fname"] == "/tmp/run/ckpt-3.pt"  # most time first
    assert abs(s.by_file.get_column("share").sum() - 1.0) < 1e-9
    assert s.by_file.get_column("share")[0] == 30 / (30 + 8 * 10)


def test_fast_path_general_reader_and_whole_frame_agree(tmp_path, monkeypatch):
    monkeypatch.setattr(_lines, "CHUNK_BYTES", 3000)
    monkeypatch.setattr(_inflate, "_MAX_OUT", 2500)
    monkeypatch.setattr(fastpath, "_REST_BATCH", 1500)
    monkeypatch.setattr(fastpath, "_GRAPH_BATCH", 7)
    paths = _training(tmp_path, steps=30)
    fast = _summary(paths)
    general = finish(merge([PB.general_file_partial(p) for p in paths]))
    assert_frame_equal(fast.by_file, general.by_file, check_exact=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = summarize(read_trace(paths, columns=P.SUMMARY_COLUMNS))
    assert_frame_equal(fast.by_file, whole.by_file, check_exact=True)
    # merged in any split: the same
    parts = [fastpath.file_partial(p) for p in paths]
    assert_frame_equal(finish(merge([merge(parts[2:]), merge(parts[:2])])).by_file, fast.by_file, check_exact=True)
    assert fast.by_file.height == 31


def test_a_file_read_by_several_processes(tmp_path):
    """The same file read by the main process and two workers: counts add up, three processes, two workers."""
    paths = []
    for pid, worker in ((100, None), (101, 0), (102, 1)):
        tr = st.Trace(pid, ppid=100 if worker is not None else 1)
        fh = tr.fh("/data/shard.bin")
        if worker is not None:
            tr.event("dataloader.fetch", "dataloader", st.T0, 50, {"loader": 1, "batch": worker, "worker": worker})
        tr.event("open", "POSIX", st.T0 + 1, 3, {"fhash": fh, "fd": 3, "ret": 3})
        tr.event("read", "POSIX", st.T0 + 5, 7, {"fhash": fh, "fd": 3, "ret": 1000})
        tr.event("read", "POSIX", st.T0 + 13, 1, {"fhash": fh, "fd": 3, "ret": 0})  # end of file: a read, 0 bytes
        tr.event("close", "POSIX", st.T0 + 15, 2, {"fhash": fh, "fd": 3, "ret": 0})
        tr.end(st.T0 + 100)
        paths.append(tr.write(tmp_path / f"t-{pid}.pfw"))
    (row,) = _summary(paths).by_file.iter_rows(named=True)
    assert (row["opens"], row["reads"], row["bytes_read"], row["writes"], row["events"]) == (3, 6, 3000, 0, 12)
    assert (row["processes"], row["workers"], row["io_us"], row["total_us"], row["share"]) == (3, 2, 39, 39, 1.0)


def test_io_inside_compile(tmp_path):
    """Reads that start inside a dynamo.compile event of their thread count as compile I/O; one on
    another thread at the same time does not."""
    tr = st.Trace(7)
    tr.event("entire_frame_compile", "dynamo.compile", st.T0, 1000, {"compile_id": "0/0"})
    tr.event("inductor_compile", "dynamo.compile", st.T0 + 100, 200, {"compile_id": "0/0"})  # nested
    for k in range(3):
        tr.event("read", "POSIX", st.T0 + 150 + 10 * k, 4, {"fhash": tr.fh(f"/torch/src{k}.py"), "fd": 9, "ret": 50})
    tr.event("read", "POSIX", st.T0 + 200, 4, {"fhash": tr.fh("/torch/src0.py"), "fd": 9, "ret": 50}, tid=77)
    tr.event("read", "POSIX", st.T0 + 1000, 6, {"fhash": tr.fh("/data/x.bin"), "fd": 3, "ret": 8})  # at its end: out
    tr.end(st.T0 + 2000)
    rows = _rows(_summary([tr.write(tmp_path / "t-7.pfw")]))
    src0 = rows["/torch/src0.py"]
    assert (src0["events"], src0["compile_events"], src0["total_us"], src0["compile_us"]) == (2, 1, 8, 4)
    assert (rows["/torch/src1.py"]["compile_events"], rows["/torch/src1.py"]["events"]) == (1, 1)
    assert (rows["/data/x.bin"]["compile_events"], rows["/data/x.bin"]["compile_us"]) == (0, 0)


def test_torch_load_and_save_bytes_count_once(tmp_path):
    """torch.load(path) reads through Python's open (its reads are seen: its bytes are not added again);
    torch.save(obj, path) writes from C++ (no write seen: its bytes are the file's). Time is the union."""
    tr = st.Trace(8)
    a, b = tr.fh("/ckpt/a.pt"), tr.fh("/ckpt/b.pt")
    tr.event("torch.load", "torch.io", st.T0, 100, {"fhash": a, "bytes": 5000})
    tr.event("open", "POSIX", st.T0 + 2, 3, {"fhash": a, "fd": 4, "ret": 4})
    tr.event("read", "POSIX", st.T0 + 10, 20, {"fhash": a, "fd": 4, "ret": 4096})
    tr.event("read", "POSIX", st.T0 + 40, 10, {"fhash": a, "fd": 4, "ret": 904})
    tr.event("read", "POSIX", st.T0 + 60, 5, {"fhash": a, "fd": 4, "ret": -1})  # an error: no bytes
    tr.event("torch.save", "torch.io", st.T0 + 200, 50, {"fhash": b, "bytes": 7000})
    tr.event("torch.load", "torch.io", st.T0 + 300, 40, {"fhash": b, "bytes": 7000, "__note": "mmap"})  # unseen
    tr.event("read", "POSIX", st.T0 + 345, 5, {"fhash": b, "fd": 5, "ret": 10})  # after the load, its own
    tr.end(st.T0 + 1000)
    rows = _rows(_summary([tr.write(tmp_path / "t-8.pfw")]))
    ra, rb = rows["/ckpt/a.pt"], rows["/ckpt/b.pt"]
    assert (ra["loads"], ra["load_us"], ra["reads"], ra["bytes_read"], ra["opens"]) == (1, 100, 3, 5000, 1)
    assert (ra["io_us"], ra["total_us"]) == (38, 100)
    assert (rb["saves"], rb["bytes_written"], rb["loads"], rb["bytes_read"], rb["reads"]) == (1, 7000, 1, 7010, 1)
    assert (rb["save_us"], rb["load_us"], rb["io_us"], rb["total_us"]) == (50, 40, 5, 95)
    assert list(rows) == ["/ckpt/a.pt", "/ckpt/b.pt"]


def test_events_without_a_file(tmp_path):
    """A torch.save to an unnamed stream names no file: one row with a null path."""
    tr = st.Trace(9)
    tr.event("torch.save", "torch.io", st.T0, 20, {"bytes": 300})
    tr.event("write", "POSIX", st.T0 + 50, 2, {"fd": 1, "ret": 12})
    tr.end(st.T0 + 100)
    (row,) = _summary([tr.write(tmp_path / "t-9.pfw")]).by_file.iter_rows(named=True)
    assert row["fname"] is None
    assert (row["saves"], row["writes"], row["bytes_written"], row["total_us"]) == (1, 1, 312, 22)


def test_no_io_events_no_rows(tmp_path):
    """Without POSIX or torch.io events: an empty table with its columns (and no work: file_table returns
    at its first check)."""
    tr, _ = st.training_trace(steps=3, save_after=None)
    s = _summary([tr.write(tmp_path / "t.pfw")])
    assert s.by_file.height == 0 and list(s.by_file.columns) == list(BY_FILE_COLUMNS)
    frame = read_trace([tmp_path / "t.pfw"], columns=P.SUMMARY_COLUMNS).filter(pl.col("cat") != "dynamo")
    assert file_table(P._ensure(frame)).height == 0


def test_pydftracer_posix_events(tmp_path):
    """pydftracer's own POSIX events (integer hashes through FH) give the same table."""
    path = tmp_path / "old.pfw"
    path.write_text(GEN_A)
    (row,) = _summary([path]).by_file.iter_rows(named=True)
    assert (row["fname"], row["reads"], row["bytes_read"], row["io_us"], row["processes"]) == (
        "/data/file.bin", 1, 4096, 17, 1,
    )  # fmt: skip


def test_union_of_intervals_per_group():
    """The numpy union (groups lifted apart) equals the plain polars one, nulls, nesting and touching included."""
    import numpy as np

    import dynascope.analyze.files as F

    rng = np.random.default_rng(3)
    n = 5000
    ts = rng.integers(0, 20_000, n)
    c = pl.DataFrame({
        "trace_file": rng.choice(["a", "b"], n), "pid": rng.integers(1, 3, n), "tid": rng.integers(1, 4, n),
        "fname": pl.Series(rng.choice(["/x", "/y", "/z", ""], n)).replace("", None), "ts": ts,
        "end": ts + rng.integers(0, 40, n),
    })  # fmt: skip
    keys = ["trace_file", "pid", "tid", "fname"]
    want = F._union(c, keys).group_by(keys).agg((pl.col("b") - pl.col("a")).sum().alias("us")).sort(keys)
    assert_frame_equal(F._union_us(c, keys).sort(keys), want, check_dtypes=False)
    # times too far apart to lift the groups apart in int64: the polars path, the same answer
    far = c.head(8).with_columns(pl.Series("ts", [0, 1 << 61] * 4), pl.Series("end", [5, (1 << 61) + 7] * 4))
    want = F._union(far, keys).group_by(keys).agg((pl.col("b") - pl.col("a")).sum().alias("us")).sort(keys)
    assert_frame_equal(F._union_us(far, keys).sort(keys), want, check_dtypes=False)
    # touching intervals merge; a nested one adds nothing
    one = pl.DataFrame({"trace_file": "a", "pid": 1, "tid": 1, "fname": "/x", "ts": [0, 10, 12, 30], "end": [10, 20, 15, 31]})
    assert F._union_us(one, keys)["us"].to_list() == [21]


def test_the_programs_files_first_the_rest_grouped(tmp_path):
    """by_file: the program's files first, then other single files, then one row per group (Python's
    imports, dynascope's own files, compiler caches; the pipes last), every count adding up to the files'
    own; the pipes' waiting has no share and the others' shares add to 1."""
    import dynascope.analyze.files as F

    site = "/venv/lib/python3.11/site-packages"
    paths = {
        "/data/val.bin": ("program", 0, 30),
        "/home/me/proj/ckpt.pt": ("program", 0, 50),
        "/home/me/proj/dynascope/demo/train.py": ("program", 0, 2),  # the built-in demo is a program
        f"{site}/numpy-2.4.6.dist-info/entry_points.txt": ("python", 0, 40),  # torch listing its backends
        f"{site}/sympy-1.14.0.dist-info/entry_points.txt": ("python", 0, 45),
        f"{site}/torch/_dynamo/eval_frame.py": ("python", 1, 70),  # linecache while Dynamo traces
        "/usr/lib/python3.11/inspect.py": ("python", 1, 3),
        "/home/me/proj/__pycache__/model.cpython-311.pyc": ("python", 0, 1),
        f"{site}/dynascope-0.1.0.dist-info/entry_points.txt": ("dynascope", 0, 8),
        f"{F._OWN}/analyze/files.py": ("dynascope", 0, 9),
        "/home/me/proj/src/dynascope.egg-info/entry_points.txt": ("dynascope", 0, 7),  # run from a checkout
        "/home/me/proj/out/train-4242.pfw.gz": ("dynascope", 0, 6),  # a trace file
        "/tmp/torchinductor_root/ab/cabc.py": ("compiler cache", 1, 60),
        "pipe:[3741]": ("pipes", 1, 900_000),
        "socket:[11]": ("pipes", 1, 100),
        f"{site}/tokenizers/vocab.json": ("packages", 0, 20),  # a library's data file
        "/proc/self/status": ("other", 0, 4),
    }
    tr = st.Trace(31)
    tr.event("entire_frame_compile", "dynamo.compile", st.T0, 2_000_000, {"compile_id": "0/0"})
    t = st.T0 + 2_000_000 + 10
    for path, (_, in_compile, dur) in paths.items():
        ts = st.T0 + 100 if in_compile else t
        tr.event("read", "POSIX", ts, dur, {"fhash": tr.fh(path), "fd": 5, "ret": 100})
        t += dur + 10
    tr.event("read", "POSIX", t, 5, {"fhash": tr.fh("/data/val.bin"), "fd": 5, "ret": 100})
    tr.end(t + 100)
    trace = tr.write(tmp_path / "t-31.pfw")
    s = _summary([trace])
    by = s.by_file
    rows = by.iter_rows(named=True)
    got = [(r["group"], r["fname"]) for r in rows]
    assert got == [
        ("program", "/home/me/proj/ckpt.pt"), ("program", "/data/val.bin"), ("program", "/home/me/proj/dynascope/demo/train.py"),
        ("other", "/proc/self/status"), ("python", "(Python imports: 5 files)"),
        ("compiler cache", "(compiler caches: 1 file)"), ("dynascope", "(dynascope: 4 files)"),
        ("packages", "(installed packages' data: 1 file)"), ("pipes", "(compiler pipes: 2)"),
    ]  # fmt: skip
    # groups add up to the files' own numbers: totals unchanged
    files = file_table(P._ensure(read_trace([trace], columns=P.SUMMARY_COLUMNS)))
    for c in ("events", "reads", "bytes_read", "total_us", "io_us", "compile_events", "compile_us"):
        assert by.get_column(c).sum() == files.get_column(c).sum(), c
    assert by.get_column("files").sum() == len(paths) == files.height
    python = by.row(4, named=True)
    assert (python["files"], python["reads"], python["total_us"], python["compile_events"]) == (5, 5, 159, 2)
    # the pipes wait on compile workers: no share; the rest's shares add to 1
    pipes = by.row(-1, named=True)
    assert pipes["share"] is None and pipes["total_us"] == 900_100 and pipes["compile_events"] == 2
    assert abs(by.get_column("share").drop_nulls().sum() - 1.0) < 1e-9
    assert by.row(0, named=True)["share"] == 50 / (by.get_column("total_us").sum() - 900_100)
