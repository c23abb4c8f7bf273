"""read_trace on every layout it promises, written by hand."""

from __future__ import annotations

import gzip
import json
import random
import warnings

import polars as pl
import pytest
import synth
from support.trace_fixtures import CASE_IDS, CASES, GEN_A, GEN_C, GEN_C_NO_ARGS, PROFILER, begin_end_events, write_case

from dynascope.analyze.read.reader import TraceWarning, read_trace, read_trace_with_info
from dynascope.errors import DynascopeError, TraceFormatError


def _rows(frame: pl.DataFrame, **eq) -> pl.DataFrame:
    for k, v in eq.items():
        frame = frame.filter(pl.col(k).cast(pl.String) == str(v))
    return frame


# ---------------------------------------------------------------------------- our format


def test_ours_gz_resolves_oh_host_and_rank(tmp_path):
    files = synth.write_two_process_trace(tmp_path)
    frame, info = read_trace_with_info(files)
    assert frame.height == 25  # 19 complete events in A, 6 in B; metadata records are not rows
    assert info.events == 25 and info.dropped_lines == 0 and info.dropped_events == 2
    assert "ph" not in frame.columns
    row = _rows(frame, pid=100, id=7).row(0, named=True)
    assert row["name"] == "function.addmm.default"
    assert (row["layer"], row["module_type"], row["phase"], row["target"]) == ("fc1", "Linear", "forward", "aten.addmm.default")
    assert (row["compile_id"], row["graph"], row["line"], row["code"]) == ("0/0", "__compiled_fn_1", 14, "x = self.fc1(x)")
    assert (row["host"], row["rank"], row["world_size"], row["p_idx"], row["dur"]) == ("nodeA", 0, 2, 6, 30)
    g = _rows(frame, pid=200, id=3).row(0, named=True)
    assert (g["kind"], g["n_ops"], g["host"], g["rank"]) == ("graph", 2, "nodeB", 1)
    region = _rows(frame, pid=100, id=13).row(0, named=True)
    assert (region["cat"], region["epoch"], region["step"]) == ("train", 0, 1)
    assert frame.schema["ts"] == pl.Int64 and frame.schema["name"] == pl.Categorical


def test_directory_glob_and_list_agree(tmp_path):
    synth.write_two_process_trace(tmp_path / "d")
    by_dir = read_trace(tmp_path / "d")
    by_glob = read_trace(str(tmp_path / "d" / "*.pfw.gz"))
    by_list = read_trace([tmp_path / "d" / "trace-100.pfw.gz", tmp_path / "d" / "trace-200.pfw.gz"])
    assert by_dir.height == by_glob.height == by_list.height == 25
    assert sorted(by_dir.get_column("trace_file").cast(pl.String).unique().to_list()) == sorted(
        str(p) for p in (tmp_path / "d").glob("*.pfw.gz")
    )


def test_columns_keeps_only_those(tmp_path):
    files = synth.write_two_process_trace(tmp_path)
    frame = read_trace(files, columns=["name", "dur", "layer", "host", "nope"])
    assert frame.columns == ["name", "dur", "layer", "host", "nope"]
    assert frame.get_column("nope").null_count() == frame.height
    assert _rows(frame, name="function.mm.default").get_column("layer").to_list() == ["fc1", "fc1"]


def test_inline_args_without_oh(tmp_path):
    ev = [
        {"id": 2, "name": "function.addmm.default", "cat": "dynamo", "pid": 5, "tid": 5, "ts": 10, "dur": 4, "ph": "X",
         "args": {"hhash": "1", "p_idx": -1, "level": 1, "grad_enabled": 1, "layer": "l0", "phase": "forward", "graph": "g", "compile_id": "0/0"}},
    ]  # fmt: skip
    p = synth.write_pfw(tmp_path / "t.pfw", ev)
    row = read_trace(p).row(0, named=True)
    assert (row["layer"], row["phase"], row["graph"]) == ("l0", "forward", "g")


# ---------------------------------------------------------------------------- the fast path


def _big_trace(n: int, seed: int = 1) -> tuple[list[dict], list[str]]:
    """n op lines of one shape, plus a few tricky lines that must fall back to the JSON parser."""
    rnd = random.Random(seed)
    names = ["function.addmm.default", "function.relu.default", "method.view", "layers.0.Linear_addmm"]
    events = []
    for i in range(n):
        events.append(synth.op(i + 2, rnd.choice(names), 7, 1000 + 3 * i, rnd.randint(0, 50), synth.OP_ADDMM, synth.HA, i // 4, 3))
    # same keys, values the comma splitter must not trust
    tricky = ["a,b", 'say "hi"', "caf\u00e9", "back\\slash", "tab\there", "{brace}", ":colon:"]
    for j, name in enumerate(tricky):
        events.insert(100 + 37 * j, synth.op(10_000_000 + j, name, 7, 5, 1 + j, synth.OP_ADDMM, synth.HA))
    # other shapes in the middle: metadata, a region, a float duration, a B/E pair
    events.insert(50, synth.meta("HH", 7, {"hhash": synth.HA, "name": "hostx", "value": synth.HA}))
    events.insert(300, synth.x(20_000_000, "step", "train", 7, 1000, 100, {"hhash": synth.HA, "epoch": 3, "step": 9}))
    events.insert(400, {"id": 20_000_001, "name": "flt", "cat": "dynamo", "pid": 7, "tid": 7, "ts": 7, "dur": 2.6, "ph": "X"})
    events.insert(401, {"name": "B1", "cat": "user", "pid": 7, "tid": 7, "ts": 100, "ph": "B", "args": {"step": 1}})
    events.insert(402, {"name": "B1", "cat": "user", "pid": 7, "tid": 7, "ts": 130, "ph": "E"})
    return events, tricky


@pytest.mark.parametrize("gz", [False, True])
def test_fast_path_matches_json_parse(tmp_path, gz):
    events, tricky = _big_trace(3000)
    path = synth.write_pfw(tmp_path / ("big.pfw.gz" if gz else "big.pfw"), events, gz=gz, members=4)
    frame = read_trace(path)
    complete = [e for e in events if e["ph"] == "X"]
    assert frame.height == len(complete) + 1  # + the paired B/E
    got = frame.sort("id").select("id", "name", "ts", "dur", "p_idx", "host").rows()
    want = sorted(
        (e["id"], e["name"], e["ts"], round(e["dur"]), (e.get("args") or {}).get("p_idx"), "hostx")
        for e in complete
    )  # the file's one HH record names the host of events without hhash too
    want.append((None, "B1", 100, 30, None, "hostx"))
    assert sorted(got, key=lambda r: (r[0] is None, r[0] or 0)) == sorted(want, key=lambda r: (r[0] is None, r[0] or 0))
    for name in tricky:
        assert _rows(frame, name=name).height == 1, name
    region = _rows(frame, name="step").row(0, named=True)
    assert (region["epoch"], region["step"]) == (3, 9)


# ---------------------------------------------------------------------------- pydftracer layouts

def test_pydftracer_gen_c_integer_ph_and_hashes(tmp_path):
    p = tmp_path / "a-9108f9e6e4763325-app.pfw"
    p.write_text(GEN_C)
    frame = read_trace(p)
    assert frame.get_column("name").cast(pl.String).to_list() == ["start", "function.convolution.default", "function.relu.default", "end"]
    assert frame.get_column("type").to_list() == [1, 6, 6, 1]
    assert set(frame.get_column("host").cast(pl.String).to_list()) == {"vm"}
    start = _rows(frame, name="start").row(0, named=True)
    assert (start["cmd"], start["exec"], start["cwd"], start["ppid"]) == ("/scratch/run;seed_a.py", "DEFAULT", "/scratch/run", 5300)
    assert _rows(frame, name="function.convolution.default").row(0, named=True)["dur"] == 6590


def test_pydftracer_gen_c_gz_without_args(tmp_path):
    p = tmp_path / "trace-0123456789abcdef-app.pfw.gz"
    p.write_bytes(gzip.compress(GEN_C_NO_ARGS.encode()))
    frame = read_trace(p)
    assert frame.height == 4
    assert _rows(frame, name="function.relu.default").get_column("dur").to_list() == [134]


def test_pydftracer_gen_a_brackets_and_integer_hashes(tmp_path):
    p = tmp_path / "app-python-10264-1.pfw"
    p.write_text(GEN_A)
    frame = read_trace(p)
    assert frame.height == 2
    row = _rows(frame, name="read").row(0, named=True)
    assert (row["host"], row["fname"], row["ret"]) == ("oldhost", "/data/file.bin", 4096)


# ---------------------------------------------------------------------------- Chrome trace JSON

@pytest.mark.parametrize("kind", ["json", "json.gz", "array"])
def test_chrome_trace_json(tmp_path, kind):
    if kind == "array":
        p = tmp_path / "t.json"
        p.write_text(json.dumps(PROFILER["traceEvents"]))
    elif kind == "json":
        p = tmp_path / "host_4242.pt.trace.json"
        p.write_text(json.dumps(PROFILER, indent=1))
    else:
        p = tmp_path / "host_4242.pt.trace.json.gz"
        p.write_bytes(gzip.compress(json.dumps(PROFILER, indent=1).encode()))
    frame = read_trace(p)
    assert sorted(frame.get_column("name").cast(pl.String).to_list()) == ["ProfilerStep#1", "aten::addmm", "nn.Module: Linear_0"]
    addmm = _rows(frame, name="aten::addmm").row(0, named=True)
    assert (addmm["dur"], addmm["ts"], addmm["Sequence number"]) == (13, 1700000000000, 7)
    assert _rows(frame, name="ProfilerStep#1").row(0, named=True)["dur"] == 50


def test_begin_end_pairs_are_complete_events(tmp_path):
    p = tmp_path / "steps.json"
    p.write_text(json.dumps({"traceEvents": begin_end_events(25)}))
    frame, info = read_trace_with_info(p)
    assert frame.height == 50 and info.unpaired == 0
    steps = frame.filter(pl.col("cat").cast(pl.String) == "step").sort("ts")
    assert steps.height == 25 and steps.get_column("dur").unique().to_list() == [800]
    assert steps.get_column("step").to_list() == list(range(25))


def test_unpaired_begin_and_end_are_counted(tmp_path):
    events = begin_end_events(2)
    events.append({"ph": "B", "name": "open", "pid": 9, "tid": 9, "ts": 5000})
    events.insert(1, {"ph": "E", "name": "stray", "pid": 9, "tid": 9, "ts": 1})
    p = tmp_path / "unpaired.json"
    p.write_text(json.dumps(events))
    with pytest.warns(TraceWarning, match="1 'B' event"):
        frame, info = read_trace_with_info(p)
    assert frame.height == 4 and info.unpaired == 2


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_shared_fixture_rows(tmp_path, case):
    path = write_case(case, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frame, info = read_trace_with_info(path)
    if case.rows >= 0:
        assert frame.height == info.events == case.rows
    assert info.dropped_lines == case.dropped_lines or case.rows < 0


# ---------------------------------------------------------------------------- damage and errors


def test_truncated_gzip_member_is_skipped_with_warning(tmp_path):
    events = synth.process_a()
    lines = [("[\n" if i == 0 else "") + synth.line(e) + "\n" for i, e in enumerate(events)]
    groups = [lines[:10], lines[10:20], lines[20:]]
    members = [gzip.compress("".join(g).encode(), compresslevel=1) for g in groups]
    p = tmp_path / "cut.pfw.gz"
    p.write_bytes(members[0] + members[1] + members[2][:14])  # SIGKILL inside the third member
    with pytest.warns(TraceWarning, match=r"cut\.pfw\.gz: gzip stream truncated"):
        frame, info = read_trace_with_info(p)
    kept = [e for e in events[:20] if e["ph"] == "X"]
    assert frame.height == len(kept) == 13
    assert sorted(frame.get_column("id").to_list()) == sorted(e["id"] for e in kept)
    assert any("truncated" in w for w in info.warnings)
    # cut mid-way through the third member's data: its whole lines are kept, the torn one counted
    p.write_bytes(members[0] + members[1] + members[2][: len(members[2]) - 12])
    with pytest.warns(TraceWarning, match="truncated"):
        frame2, info2 = read_trace_with_info(p)
    assert 13 <= frame2.height <= 19
    assert info2.dropped_lines <= 1


def test_torn_last_line_is_counted(tmp_path):
    events = synth.process_b()
    text = "[\n" + "".join(synth.line(e) + "\n" for e in events)
    p = tmp_path / "torn.pfw"
    p.write_text(text + synth.line(events[3])[:30])  # a writer killed mid-line
    with pytest.warns(TraceWarning, match=r"torn\.pfw: last line is torn.*skipped 1 line"):
        frame, info = read_trace_with_info(p)
    assert frame.height == 6 and info.dropped_lines == 1


def test_corrupt_line_in_the_middle_is_counted(tmp_path):
    events = synth.process_b()
    lines = [synth.line(e) for e in events]
    lines.insert(3, '{"id":99,"name":"bro')
    p = tmp_path / "mid.pfw"
    p.write_text("\n".join(lines) + "\n")
    with pytest.warns(TraceWarning, match="skipped 1 line"):
        frame, info = read_trace_with_info(p)
    assert frame.height == 6 and info.dropped_lines == 1


@pytest.mark.parametrize(
    ("name", "content", "expect"),
    [
        ("notes.txt", b"hello world\nthis is not a trace\n", "starts with 'hello world'"),
        ("cfg.json", b'{"model": "resnet", "lr": 0.1}', "without a traceEvents list"),
        ("data.pfw.gz", gzip.compress(b"a,b,c\n1,2,3\n", mtime=0), "starts with 'a,b,c'"),
        ("list.json", b"[1, 2, 3]", "no events"),
        ("lines.pfw", b'{"a": 1}\n{"b": 2}\n', "no line is a JSON event"),
    ],
    ids=["text", "json-object", "gzip-csv", "json-list", "json-lines"],  # stable ids: pytest -n 2 collects twice
)
def test_not_a_trace_is_one_clear_error(tmp_path, name, content, expect):
    p = tmp_path / name
    p.write_bytes(content)
    with pytest.raises(TraceFormatError) as exc:
        read_trace(p)
    msg = str(exc.value)
    assert str(p) in msg and "not a trace" in msg and expect in msg
    assert "\n" not in msg and isinstance(exc.value, DynascopeError)


def test_missing_path_and_empty_glob(tmp_path):
    with pytest.raises(TraceFormatError, match="no such file"):
        read_trace(tmp_path / "nope.pfw")
    with pytest.raises(TraceFormatError, match="no file matches"):
        read_trace(str(tmp_path / "*.pfw"))


def test_empty_file_warns_and_gives_no_rows(tmp_path):
    p = tmp_path / "empty.pfw"
    p.write_text("")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frame = read_trace(p)
    assert frame.height == 0 and any("empty" in str(w.message) for w in caught)


def test_pretty_printed_array_and_directory_with_other_json(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "profile.json").write_text(json.dumps(PROFILER["traceEvents"], indent=2))
    (d / "explanation.json").write_text(json.dumps({"version": 1, "frames": []}))
    synth.write_pfw(d / "trace-200.pfw.gz", synth.process_b(), gz=True)
    frame = read_trace(d)  # the explanation beside the traces is not read as one
    files = set(frame.get_column("trace_file").cast(pl.String).unique().to_list())
    assert files == {str(d / "profile.json"), str(d / "trace-200.pfw.gz")}
    assert _rows(frame, name="aten::addmm").height == 1 and frame.height == 3 + 6


@pytest.mark.parametrize("where", ["start", "end", "middle", "spread"])
def test_lines_at_finds_the_misfit_lines(where):
    from dynascope.analyze.read.line_shapes import lines_at

    n = 5000
    lines = [b'{"i":%d}' % i for i in range(n)]
    chunk = b"\n".join(lines) + b"\n"
    pick = {"start": [0, 3, 1999], "end": [n - 1, n - 7, n - 2000], "middle": [2500], "spread": [0, 2500, n - 1]}[where]
    mask = pl.Series([i in pick for i in range(n)])
    assert lines_at(chunk, mask) == [lines[i] for i in sorted(pick)]
    assert lines_at(chunk + b"x\n", mask) is None  # row count and line count disagree


def test_shapes_are_learned_again_when_a_file_changes(tmp_path, monkeypatch):
    from dynascope.analyze.read import lines, reader
    from dynascope.analyze.read.line_shapes import LineTemplates

    monkeypatch.setattr(lines, "CHUNK_BYTES", 64 << 10)
    monkeypatch.setattr(reader, "FAST_MIN_LINES", 100)
    learned = []
    real_learn = LineTemplates.learn.__func__

    def spy(cls, chunk):
        out = real_learn(cls, chunk)
        learned.append(out is not None and out.templates[0].fields[0].column)
        return out

    monkeypatch.setattr(LineTemplates, "learn", classmethod(spy))
    # first 2000 compile events (one shape), then 4000 op events of another shape
    events = [synth.x(i + 2, "phase", "dynamo.compile", 9, i, 1, {"compile_id": "0/0", "fn_name": "f"}) for i in range(2000)]
    events += [
        {"name": "function.f", "cat": "dynamo", "pid": 9, "tid": 9, "ph": "X", "args": {"grad_enabled": 1, "level": 2, "p_idx": 1}, "id": 5000 + i, "ts": 9000 + i, "dur": i % 7}
        for i in range(4000)
    ]  # fmt: skip
    p = synth.write_pfw(tmp_path / "late.pfw", events)
    frame = read_trace(p)
    assert frame.height == 6000
    ops = _rows(frame, name="function.f")
    assert ops.height == 4000 and ops["dur"].sum() == sum(i % 7 for i in range(4000))
    assert learned[0] == "id" and "name" in learned[1:]  # op lines start with "name": learned later
