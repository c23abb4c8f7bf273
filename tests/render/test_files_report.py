"""The per-file I/O table in `dynascope report` (terminal, --json, --csv, --html) and the end-of-run
summary, from a synthetic training trace (tests/support/step_trace.py): a checkpoint, samples read by two
DataLoader workers, inductor's temporary files and torch's own sources read inside a compile phase,
installed packages' metadata read outside it, and a compile worker's pipe waited on."""

from __future__ import annotations

import csv
import json
import re

import pytest
from support import step_trace as st

from dynascope.cli import main as cli_main
from dynascope.render._analysis import summarize_paths
from dynascope.render.html import render_html
from dynascope.render.terminal import short_text, summary_text

EVIL = "/data/<script>alert('x')</script>.bin"
TORCH_SRC = "/venv/lib/python3.11/site-packages/torch/_inductor/codecache_{}.py"
TMP_SRC = "/tmp/tmpk2v9/codecache_{}.cpp"  # inductor's own temporary files: single files, not a group
METADATA = "/venv/lib/python3.11/site-packages/pkg{}-1.0.dist-info/entry_points.txt"


def _main_process(compile_reads: int = 40) -> st.Trace:
    tr, _ = st.training_trace(steps=8, save_after=3)
    tr.event("entire_frame_compile", "dynamo.compile", st.T0 - 5000, 4000, {"compile_id": "0/0"})
    for k in range(compile_reads):
        tr.event("read", "POSIX", st.T0 - 4900 + 50 * k, 20, {"fhash": tr.fh(TMP_SRC.format(k)), "fd": 9, "ret": 1000})
    for k in range(3):
        tr.event("read", "POSIX", st.T0 - 4890 + 50 * k, 10, {"fhash": tr.fh(TORCH_SRC.format(k)), "fd": 9, "ret": 500})
        tr.event("read", "POSIX", st.T0 - 900 + 50 * k, 20, {"fhash": tr.fh(METADATA.format(k)), "fd": 8, "ret": 90})
    tr.event("read", "POSIX", st.T0 - 4990, 4900, {"fhash": tr.fh("pipe:[3741]"), "fd": 11, "ret": 4096})
    tr.event("read", "POSIX", st.T0 - 200, 7, {"fhash": tr.fh(EVIL), "fd": 3, "ret": 64})
    return tr


@pytest.fixture
def traces(tmp_path):
    paths = [_main_process().write(tmp_path / "train-4242.pfw.gz", gz=True)]
    for w in range(2):
        worker = st.worker_trace(5000 + w, 4242, w, list(range(w, 8, 2)), st.T0)
        paths.append(worker.write(tmp_path / f"train-{5000 + w}.pfw"))
    return paths


def _cells(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


def test_terminal_files_after_the_steps(traces, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert cli_main(["report", *map(str, traces), "--top", "5"]) == 0
    out = capsys.readouterr().out
    files = out.index("Files: where the program's file I/O goes (top 5 of 12)")
    assert out.index("Steps: where each step's time goes") < files < out.index("Compile vs run")
    table = out[files:].splitlines()
    header = next(ln for ln in table if " time " in ln)
    assert _cells(header) == ["file", "time", "share", "reads", "read", "writes", "written", "saves", "procs", "workers"]
    rows = [_cells(ln) for ln in table[4:9]]
    assert rows[0] == ["/tmp/run/ckpt-3.pt", "30 µs", "3.0%", "0", "0 B", "2", "4.1 kB", "1", "1", "0"]
    assert rows[1][0] == "/data/sample-0.pt" and rows[1][-2:] == ["1", "1"]  # a worker's read
    # inductor's temporary files, read only inside the compile phase: one line, not 40 rows
    assert "codecache_" not in out
    line = next(ln for ln in table if "touched only while compiling" in ln)
    assert line == "40 more files touched only while compiling: 40 kB read, 800 µs (79.4% of the file I/O time)"


def test_terminal_groups_below_the_programs_files(traces, capsys, monkeypatch):
    """Python's imports (torch's sources, packages' metadata) and the compiler's pipe: one row each, below
    every file of the program; the pipe's waiting has no share and is not in the compile-only line."""
    monkeypatch.setenv("COLUMNS", "200")
    assert cli_main(["report", *map(str, traces)]) == 0
    out = capsys.readouterr().out
    table = out[out.index("Files: where the program's file I/O goes") :].splitlines()
    rows = [_cells(ln) for ln in table[4:16]]
    assert [r[0] for r in rows[:10]] == [
        "/tmp/run/ckpt-3.pt", *(f"/data/sample-{b}.pt" for b in range(8)), EVIL,
    ]  # fmt: skip
    assert rows[10][:6] == ["(Python imports: 6 files)", "90 µs", "8.9%", "6", "1.77 kB", "0"]
    assert rows[11][:6] == ["(compiler pipes: 1)", "4.9 ms", "–", "1", "4.1 kB", "0"]
    assert "dist-info" not in out and "pipe:[" not in out


def test_terminal_without_file_io(tmp_path):
    tr, _ = st.training_trace(steps=3, save_after=None)
    text = summary_text(summarize_paths([tr.write(tmp_path / "t.pfw")]))
    assert "Files:" not in text and "touched only while compiling" not in text
    assert "I/O:" not in short_text(summarize_paths([tmp_path / "t.pfw"]))


def test_terminal_only_compile_io(tmp_path):
    tr = st.Trace(77)
    tr.event("entire_frame_compile", "dynamo.compile", st.T0, 1000, {"compile_id": "0/0"})
    tr.event("read", "POSIX", st.T0 + 10, 20, {"fhash": tr.fh(TMP_SRC.format(0)), "fd": 9, "ret": 1000})
    tr.end(st.T0 + 2000)
    summary = summarize_paths([tr.write(tmp_path / "t-77.pfw")])
    text = summary_text(summary)
    assert "Files:" not in text
    assert "File I/O: 1 file touched only while compiling: 1 kB read, 20 µs (100.0% of the file I/O time)" in text
    assert "I/O: no program files (all 1 file: 20 µs)" in short_text(summary)


def test_long_paths_keep_their_file_name(tmp_path):
    tr = st.Trace(78)
    path = "/scratch/" + "very-long-directory-name/" * 6 + "shard-0001.tar"
    tr.event("read", "POSIX", st.T0, 20, {"fhash": tr.fh(path), "fd": 3, "ret": 10})
    tr.end(st.T0 + 100)
    text = summary_text(summarize_paths([tr.write(tmp_path / "t-78.pfw")]))
    row = next(ln for ln in text.splitlines() if "shard-0001.tar" in ln)
    assert _cells(row)[0].startswith("…") and _cells(row)[0].endswith("/shard-0001.tar")


def test_short_summary_has_one_io_line(traces):
    text = short_text(summarize_paths(traces))
    lines = [ln for ln in text.splitlines() if ln.startswith("I/O:")]
    assert lines == ["I/O: 10 program files, 4.16 kB read, 4.1 kB written, 117 µs (all 56 files: 1.01 ms)"]
    # the compiler's pipe: its waiting said on the next line, out of the I/O time
    after = text.splitlines()[text.splitlines().index(lines[0]) + 1]
    assert after == "  not counted as I/O: 4.9 ms waiting on 1 compiler pipe"


def test_json_and_csv_have_every_file(traces, tmp_path, capsys):
    assert cli_main(["report", *map(str, traces), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {r["fname"]: r for r in doc["by_file"]}
    assert len(rows) == 52  # the compile-only files too, flagged by their compile columns; one row per group
    src = rows[TMP_SRC.format(3)]
    assert (src["events"], src["compile_events"], src["compile_us"], src["bytes_read"]) == (1, 1, 20, 1000)
    assert (src["group"], src["files"]) == ("program", 1)  # no directory says whose: the program's
    imports = rows["(Python imports: 6 files)"]
    assert (imports["group"], imports["files"], imports["reads"], imports["bytes_read"]) == ("python", 6, 6, 1770)
    assert (imports["compile_events"], imports["compile_us"]) == (3, 30)
    pipe = rows["(compiler pipes: 1)"]
    assert (pipe["group"], pipe["share"], pipe["total_us"]) == ("pipes", None, 4900)
    assert [r["group"] for r in doc["by_file"]][-2:] == ["python", "pipes"]  # below every single file
    assert sum(r["files"] for r in doc["by_file"]) == 57  # 10 of the program's, 40 while compiling, 6 + 1
    assert rows["/data/sample-2.pt"]["workers"] == 1 and rows["/tmp/run/ckpt-3.pt"]["save_us"] == 30
    assert set(doc["by_file"][0]) >= {
        "fname", "opens", "reads", "bytes_read", "writes", "bytes_written", "io_us", "saves", "save_us", "loads",
        "load_us", "processes", "workers", "share", "total_us", "compile_us",
    }  # fmt: skip
    d = tmp_path / "csv"
    assert cli_main(["report", *map(str, traces), "--csv", str(d), "-q"]) == 0
    got = list(csv.DictReader((d / "by_file.csv").open()))
    assert len(got) == 52 and got[0]["fname"] == "/tmp/run/ckpt-3.pt" and got[0]["bytes_written"] == "4096"
    assert [(r["fname"], r["files"], r["share"]) for r in got[-2:]] == [
        ("(Python imports: 6 files)", "6", got[-2]["share"]), ("(compiler pipes: 1)", "1", ""),
    ]
    counted = sum(int(r["total_us"]) for r in got[:-1])  # all but the pipe's waiting
    assert float(got[-2]["share"]) == pytest.approx(90 / counted) and sum(float(r["share"]) for r in got[:-1]) == pytest.approx(1)


def test_html_section(traces):
    html = render_html(summarize_paths(traces))
    assert '<a href="#file-io">File I/O</a>' in html
    section = html[html.index('<section id="file-io">') : html.index('<section id="overview">')]
    assert '<table class="sortable" data-table="by-file">' in section
    assert section.index("ckpt-3.pt") < section.index("sample-0.pt")
    assert "codecache_" not in section
    assert "40 more files touched only while compiling" in section
    assert section.index("sample-0.pt") < section.index("(Python imports: 6 files)") < section.index("(compiler pipes: 1)")
    assert "not counted as I/O: 4.9 ms waiting on 1 compiler pipe" in section
    # a path is text, never markup; the only script is ours
    assert "<script>alert" not in html and "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;.bin" in section
    assert len(re.findall(r"<script\b[^>]*>", html)) == 1


def test_columns_of_the_rows_shown(tmp_path):
    """A column that is zero in every row shown is left out: `in compile` appears only when a file shown
    was touched inside a compile phase too."""
    tr = st.Trace(79)
    tr.event("entire_frame_compile", "dynamo.compile", st.T0, 100, {"compile_id": "0/0"})
    tr.event("read", "POSIX", st.T0 + 10, 5, {"fhash": tr.fh("/etc/both.txt"), "fd": 3, "ret": 10})
    tr.event("read", "POSIX", st.T0 + 200, 5, {"fhash": tr.fh("/etc/both.txt"), "fd": 3, "ret": 10})
    tr.event("read", "POSIX", st.T0 + 300, 50, {"fhash": tr.fh("/data/big.bin"), "fd": 4, "ret": 10})
    tr.end(st.T0 + 1000)
    summary = summarize_paths([tr.write(tmp_path / "t-79.pfw")])

    def header(top):
        text = summary_text(summary, top=top)
        return _cells(next(ln for ln in text.splitlines() if " time " in ln))

    assert header(1) == ["file", "time", "share", "reads", "read", "procs"]
    assert header(2) == ["file", "time", "share", "reads", "read", "procs", "in compile"]
