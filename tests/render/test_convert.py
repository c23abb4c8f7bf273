from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import orjson
import pytest
from render_fixtures import EVIL, build_trace
from support.trace_fixtures import begin_end_events

from dynascope.cli import main as cli_main
from dynascope.errors import TraceFormatError
from dynascope.render.chrome import convert


def load(path: Path) -> dict:
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        raw = gzip.decompress(raw)
    return json.loads(raw)  # the stdlib parser: strict JSON


def check_nesting(events: list[dict]) -> None:
    """Every X event on a thread lies within the one enclosing it: no partial overlaps."""
    by_thread = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            assert isinstance(e["ts"], int) and isinstance(e["dur"], int)
            by_thread[(e["pid"], e["tid"])].append(e)
    for evs in by_thread.values():
        stack: list[int] = []
        for e in sorted(evs, key=lambda e: (e["ts"], -e["dur"])):
            while stack and stack[-1] <= e["ts"]:
                stack.pop()
            end = e["ts"] + e["dur"]
            assert not stack or end <= stack[-1], f"{e['name']} pokes out of its parent"
            stack.append(end)


def xs(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X"]


def test_convert_nests_names_tracks_and_resolves_args(tmp_path, trace_file):
    out = tmp_path / "out.json"
    stats = convert([trace_file], out)
    doc = load(out)
    events = xs(doc)
    # 3 compile + epoch + 2 × (step + 2 graphs + 5 ops) = 20 complete events; start/end are not slices
    assert stats.events == len(events) == 20
    assert all(isinstance(e["ph"], str) for e in doc["traceEvents"])
    check_nesting(events)
    # the one op that poked out of its graph call (step 0: ends 50 µs late) was clipped
    assert stats.clipped == 1 and doc["otherData"]["clipped"] == 1
    evil = sorted((e for e in events if e["name"].startswith(EVIL)), key=lambda e: e["ts"])
    assert [e["dur"] for e in evil] == [250, 200]
    # tracks named
    meta = {(e["name"], e["pid"], e.get("tid")): e["args"] for e in doc["traceEvents"] if e["ph"] == "M"}
    assert meta[("process_name", 4242, 0)]["name"] == "python train.py"
    assert meta[("thread_name", 4242, 4242)]["name"] == "MainThread"
    # phases and compile distinguishable by cat and cname
    cats = {e["name"]: (e["cat"], e.get("cname")) for e in events}
    assert cats["function.addmm.default"] == ("dynamo,forward", "thread_state_running")
    assert cats["function.mm.default"] == ("dynamo,backward", "rail_response")
    assert cats["__compiled_fn_1.backward"][0] == "dynamo.graph,backward"
    assert cats["entire_frame_compile"] == ("dynamo.compile", "rail_animation")
    assert cats["step"][0] == "dynascope.region"
    # args resolved from OH: layer and source line; bookkeeping dropped; region args kept
    addmm = next(e for e in events if e["name"] == "function.addmm.default")
    assert addmm["args"]["layer"] == "fc1" and addmm["args"]["source"] == "train.py:14"
    assert addmm["args"]["code"] == "x = self.fc1(x)" and addmm["args"]["module_type"] == "Linear"
    assert not {"op", "p_idx", "hhash", "level", "value"} & set(addmm["args"])
    steps = sorted((e for e in events if e["name"] == "step"), key=lambda e: e["ts"])
    assert [s["args"]["step"] for s in steps] == [0, 1]


@pytest.mark.parametrize("layout", ["inline", "positional"])
def test_other_attribution_layouts_convert_the_same(tmp_path, layout):
    """Inline args, and positional OH references (op events without `op`: op k of a graph call has
    id = p_idx + 1 + k) resolve to the same slices as OH-hash references."""
    ref = build_trace().write(tmp_path / "ref.pfw")
    other = build_trace(**{layout: True}).write(tmp_path / f"{layout}.pfw.gz")
    if layout == "positional":
        lines = gzip.decompress(other.read_bytes()).decode().splitlines()
        assert not any('"op"' in ln for ln in lines if '"cat":"dynamo"' in ln)  # really without references
    a, b = xs(load(convert([ref], tmp_path / "a.json").out)), xs(load(convert([other], tmp_path / "b.json").out))

    def strip(evs):
        return sorted((e["name"], e["ts"], e["dur"], e["cat"], json.dumps(e["args"], sort_keys=True)) for e in evs)

    assert strip(a) == strip(b)
    assert any(e["args"].get("layer") == "fc1" and e["cat"] == "dynamo,backward" for e in b)


def test_two_ranks_become_two_sorted_processes_gz_output(tmp_path, two_rank_traces):
    out = tmp_path / "ranks.json.gz"
    stats = convert([two_rank_traces[0].parent], out)
    doc = load(out)
    assert stats.processes == 2 and stats.threads == 2
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert names == {5000: "python train.py [rank 0]", 5001: "python train.py [rank 1]"}
    order = {e["pid"]: e["args"]["sort_index"] for e in doc["traceEvents"] if e["name"] == "process_sort_index"}
    assert order == {5000: 0, 5001: 1}
    check_nesting(xs(doc))


def test_truncated_gzip_and_torn_lines_are_counted(tmp_path):
    body = gzip.compress(b"[\n" + b"".join(orjson.dumps(line) + b"\n" for line in build_trace().lines))
    torn = tmp_path / "torn.pfw.gz"
    torn.write_bytes(body + gzip.compress(b'{"name":"x","ph":"X","ts":1,"dur":2,"pid":1,"tid":1}\n{"name":')[:-10])
    stats = convert([torn], tmp_path / "o.json")
    # every whole line before the cut is kept, including the first line of the torn member
    assert stats.truncated == [str(torn)] and stats.events == 21
    load(tmp_path / "o.json")
    plain = tmp_path / "bad.pfw"
    plain.write_bytes(b"[\n" + b"".join(orjson.dumps(line) + b"\n" for line in build_trace().lines) + b'{"name":"half\n')
    stats = convert([plain], tmp_path / "p.json")
    assert stats.bad_lines == 1 and stats.events == 20
    load(tmp_path / "p.json")


def test_chrome_json_input_with_float_timestamps(tmp_path):
    # torch.profiler style: traceEvents object, float µs, a child ending a hair after its parent
    doc = {
        "traceEvents": [
            {"ph": "X", "name": "aten::linear", "cat": "cpu_op", "pid": 1, "tid": 7, "ts": 100.4, "dur": 50.2},
            {"ph": "X", "name": "aten::addmm", "cat": "cpu_op", "pid": 1, "tid": 7, "ts": 110.0, "dur": 40.9},
            {"ph": "i", "name": "mark", "pid": 1, "tid": 7, "ts": 120, "s": "t"},
            {"ph": "B", "name": "open", "pid": 1, "tid": 7, "ts": 130},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": "worker"}},
        ]
    }
    src = tmp_path / "prof.json"
    src.write_bytes(orjson.dumps(doc))
    stats = convert([src], tmp_path / "o.json")
    out = load(tmp_path / "o.json")
    events = xs(out)
    assert [(e["name"], e["ts"], e["dur"]) for e in events] == [("aten::linear", 100, 51), ("aten::addmm", 110, 41)]
    assert stats.clipped == 0 and stats.unsupported == 1 and stats.passed == 1
    check_nesting(events)
    assert any(e["name"] == "thread_name" and e["args"]["name"] == "worker" for e in out["traceEvents"])


def test_missing_and_non_trace_inputs_are_one_line_errors(tmp_path, capsys):
    with pytest.raises(TraceFormatError, match="no such file"):
        convert([tmp_path / "nope.pfw"], tmp_path / "o.json")
    bad = tmp_path / "notes.json"
    bad.write_text("hello, world")
    assert cli_main(["convert", str(bad), "-o", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dynascope convert: error:") and "notes.json" in err and "\n" not in err


def test_cli_convert_default_output(tmp_path, trace_file, capsys):
    assert cli_main(["convert", str(trace_file)]) == 0
    out = trace_file.with_name("train-4242.chrome.json")
    assert out.is_file()
    text = capsys.readouterr().out
    assert "20 events" in text and "1 clipped" in text and "perfetto" in text
    check_nesting(xs(load(out)))


def test_directory_input_skips_explanation_and_previous_conversions(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    build_trace().write(run / "train-4242.pfw.gz")
    (run / "explanation.json").write_text('{"schema": "dynascope.explanation/1"}')
    assert cli_main(["convert", str(run), "-q"]) == 0
    assert cli_main(["convert", str(run), "-q"]) == 0  # again: the first output is not an input now
    doc = load(run / "trace.chrome.json")
    assert doc["otherData"]["source_files"] == [str(run / "train-4242.pfw.gz")]
    assert len(xs(doc)) == 20


def test_text_file_is_not_a_trace(tmp_path, capsys):
    bad = tmp_path / "notes.pfw"
    bad.write_text("hello\nworld\n")
    assert cli_main(["convert", str(bad), "-o", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err
    assert "notes.pfw: not a trace" in err and not (tmp_path / "o.json").exists()


def test_pydftracer_integer_ph_layout_converts_to_string_phases(tmp_path):
    # pydftracer's 2.x core: no leading "[", integer ph (1 = X, 4 = M), a "type" column, a CM record
    lines = [
        {"name": "HH", "cat": "dftracer", "type": 1, "pid": 7, "tid": 7, "ph": 4, "args": {"name": "vm", "value": "aa"}},
        {"name": "CM", "cat": "dftracer", "type": 1, "pid": 7, "tid": 7, "ph": 4, "args": {"name": "time_metric", "value": "US"}},
        {"id": 2, "name": "function.relu.default", "cat": "dynamo", "type": 6, "pid": 7, "tid": 7, "ts": 100, "dur": 5, "ph": 1},
    ]
    src = tmp_path / "gen_c.pfw"
    src.write_bytes(b"\n".join(orjson.dumps(line) for line in lines) + b"\n")
    convert([src], tmp_path / "o.json")
    out = load(tmp_path / "o.json")
    assert all(isinstance(e["ph"], str) for e in out["traceEvents"])
    assert [(e["name"], e["ts"], e["dur"]) for e in xs(out)] == [("function.relu.default", 100, 5)]


def test_begin_end_pairs_become_nested_slices(tmp_path, capsys):
    """A Chrome trace of B/E step regions around X events: every step region is exported, nothing skipped."""
    src = tmp_path / "steps.json"
    src.write_bytes(orjson.dumps({"traceEvents": begin_end_events(25)}))
    stats = convert([src], tmp_path / "o.json")
    events = xs(load(tmp_path / "o.json"))
    assert stats.events == len(events) == 50 and stats.unsupported == 0 and stats.warnings == []
    steps = sorted((e for e in events if e["cat"] == "step"), key=lambda e: e["ts"])
    assert [(e["name"], e["dur"], e["args"]["step"]) for e in steps[:2]] == [("step#0", 800, 0), ("step#1", 800, 1)]
    check_nesting(events)
    assert cli_main(["convert", str(src), "-o", str(tmp_path / "c.json")]) == 0
    out = capsys.readouterr()
    assert "50 events" in out.out and "warning" not in out.err


def test_start_and_end_records_are_process_instants(tmp_path, trace_file):
    doc = load(convert([trace_file], tmp_path / "o.json").out)
    marks = [(e["name"], e["s"], e["pid"]) for e in doc["traceEvents"] if e["ph"] == "i"]
    assert marks == [("start", "p", 4242), ("end", "p", 4242)]
