"""One shared set of trace files in every layout the read side promises, for the reader, converter and
report tests alike (tests/render/test_read_agreement.py checks that all three agree on each).

Each case writes one file and says how many rows `read_trace` gives (complete events, B/E pairs
joined; metadata, instants, counters and flows are no rows) and how many lines reading skips.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# ---------------------------------------------------------------------------- pydftracer layouts

GEN_C = """\
{"name":"HH","cat":"dftracer","type":1,"pid":5304,"tid":5304,"ph":4,"args":{"hhash":"6882804a826580cd","name":"vm","value":"6882804a826580cd"}}
{"name":"FH","cat":"dftracer","type":1,"pid":5304,"tid":5304,"ph":4,"args":{"hhash":"6882804a826580cd","name":"/scratch/run","value":"65967b0272a952f3"}}
{"name":"SH","cat":"dftracer","type":1,"pid":5304,"tid":5304,"ph":4,"args":{"hhash":"6882804a826580cd","name":"/scratch/run;seed_a.py","value":"b2d0a6d985bb747e"}}
{"name":"SH","cat":"dftracer","type":1,"pid":5304,"tid":5304,"ph":4,"args":{"hhash":"6882804a826580cd","name":"DEFAULT","value":"5bc85321cd6d4bd2"}}
{"name":"CM","cat":"dftracer","type":1,"pid":5304,"tid":5304,"ph":4,"args":{"hhash":"6882804a826580cd","name":"time_metric","value":"US"}}
{"id":1,"name":"start","cat":"dftracer","type":1,"pid":5304,"tid":5304,"ts":1795294448281088,"dur":0,"ph":1,"args":{"hhash":"6882804a826580cd","ppid":5300,"cmd_hash":"b2d0a6d985bb747e","exec_hash":"5bc85321cd6d4bd2","version":20003,"date":"Sat Nov 21 20:54:08 2026","cwd":"65967b0272a952f3"}}
{"id":2,"name":"function.convolution.default","cat":"dynamo","type":6,"pid":5304,"tid":5304,"ts":1795294448656691,"dur":6590,"ph":1,"args":{"hhash":"6882804a826580cd","grad_enabled":0}}
{"id":3,"name":"function.relu.default","cat":"dynamo","type":6,"pid":5304,"tid":5304,"ts":1795294448663300,"dur":134,"ph":1,"args":{"hhash":"6882804a826580cd","grad_enabled":0}}
{"id":4,"name":"end","cat":"dftracer","type":1,"pid":5304,"tid":5304,"ts":1795294448684668,"dur":0,"ph":1,"args":{"hhash":"6882804a826580cd","app":{},"used":{"PYTHON":1},"cfg":{"enable":1,"compression":0},"num_events":3}}
"""

GEN_C_NO_ARGS = """\
{"name":"HH","cat":"dftracer","type":1,"pid":5152,"tid":5152,"ph":4,"args":{"hhash":"6882804a826580cd","name":"vm","value":"6882804a826580cd"}}
{"id":1,"name":"start","cat":"dftracer","type":1,"pid":5152,"tid":5152,"ts":1795294435215479,"dur":0,"ph":1}
{"id":2,"name":"function.convolution.default","cat":"dynamo","type":6,"pid":5152,"tid":5152,"ts":1795294435582576,"dur":1064,"ph":1}
{"id":3,"name":"function.relu.default","cat":"dynamo","type":6,"pid":5152,"tid":5152,"ts":1795294435583725,"dur":134,"ph":1}
{"id":4,"name":"end","cat":"dftracer","type":1,"pid":5152,"tid":5152,"ts":1795294435603620,"dur":0,"ph":1}
"""

# generation A: brackets, string ph, integer hashes
GEN_A = """\
[
{"id":1,"name":"HH","cat":"dftracer","pid":10264,"tid":10264,"ph":"M","args":{"hhash":123456789,"name":"oldhost","value":123456789}}
{"id":2,"name":"FH","cat":"dftracer","pid":10264,"tid":10264,"ph":"M","args":{"hhash":123456789,"name":"/data/file.bin","value":42}}
{"id":3,"name":"read","cat":"POSIX","pid":10264,"tid":10264,"ts":1000,"dur":17,"ph":"X","args":{"hhash":123456789,"fhash":42,"ret":4096}}
{"id":4,"name":"function.convolution.default","cat":"dynamo","pid":10264,"tid":10264,"ts":1100,"dur":17837,"ph":"X","args":{"hhash":123456789,"p_idx":-1,"level":1,"grad_enabled":0}}
]
"""

# ---------------------------------------------------------------------------- Chrome-trace JSON

PROFILER = {
    "schemaVersion": 1,
    "deviceProperties": [],
    "traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 4242, "tid": 0, "args": {"name": "python"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 4242, "tid": 4242, "ts": 1700000000000.25, "dur": 12.6,
         "args": {"External id": 3, "Record function id": 0, "Sequence number": 7, "Fwd thread id": 0, "Ev Idx": 2}},
        {"ph": "X", "cat": "python_function", "name": "nn.Module: Linear_0", "pid": 4242, "tid": 4242, "ts": 1700000000000.0, "dur": 20.1,
         "args": {"Python parent id": 1, "Python id": 2, "Ev Idx": 1}},
        {"ph": "B", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 4242, "tid": 4242, "ts": 1700000000000.0},
        {"ph": "E", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 4242, "tid": 4242, "ts": 1700000000050.0},
        {"ph": "i", "cat": "instant", "name": "mark", "pid": 4242, "tid": 4242, "ts": 1700000000001.0, "s": "t"},
        {"ph": "f", "id": 1, "pid": 4242, "tid": 4242, "ts": 1700000000001.0, "cat": "ac2g", "name": "flow"},
    ],
    "traceName": "x.pt.trace.json",
}  # fmt: skip


def begin_end_events(steps: int = 25) -> list[dict]:
    """What many tracers write: each step a B/E pair around one complete event (2 rows a step)."""
    events = [{"ph": "M", "name": "thread_name", "pid": 9, "tid": 9, "args": {"name": "main"}}]
    for k in range(steps):
        t = 1000 * k
        events.append({"ph": "B", "cat": "step", "name": f"step#{k}", "pid": 9, "tid": 9, "ts": t, "args": {"step": k}})
        events.append({"ph": "X", "cat": "op", "name": "matmul", "pid": 9, "tid": 9, "ts": t + 100, "dur": 500})
        events.append({"ph": "E", "cat": "step", "name": f"step#{k}", "pid": 9, "tid": 9, "ts": t + 800})
    return events


# ---------------------------------------------------------------------------- dynascope's own, damaged


def _line(obj: dict) -> str:
    return json.dumps(obj, separators=(",", ":"))


def ours(pid: int = 31, calls: int = 4) -> list[dict]:
    """A small trace in dynascope's layout: HH, OH records, start, graph calls with op events
    (op k of a call has id = p_idx + 1 + k), a step region, end."""
    hh = "9c1185a5c5e9fc54"
    meta = lambda name, args, cat="dftracer": {"name": name, "cat": cat, "pid": pid, "tid": pid, "ph": "M", "args": {"hhash": hh, **args}}  # noqa: E731
    events = [
        meta("HH", {"name": "node1", "value": hh}),
        meta("OH", {"value": 1, "kind": "graph", "compile_id": "0/0", "graph": "__compiled_fn_1", "phase": "forward"}, "dynascope"),
        meta("OH", {"value": 2, "graph_op": 1, "index": 0, "kind": "op", "phase": "forward", "layer": "fc", "module_type": "Linear", "file": "m.py", "line": 3}, "dynascope"),
        meta("OH", {"value": 3, "graph_op": 1, "index": 1, "kind": "op", "phase": "forward", "layer": "act", "module_type": "ReLU", "file": "m.py", "line": 4}, "dynascope"),
        {"id": 1, "name": "start", "cat": "dftracer", "pid": pid, "tid": pid, "ts": 0, "dur": 0, "ph": "X", "args": {"hhash": hh, "rank": 0, "world_size": 1}},
    ]
    ident = 2
    for c in range(calls):
        t = 100 + 1000 * c
        step_id, graph_id = ident, ident + 1
        events.append({"name": "__compiled_fn_1.forward", "cat": "dynamo.graph", "pid": pid, "tid": pid, "ph": "X",
                       "args": {"hhash": hh, "grad_enabled": 1, "op": 1, "level": 2, "p_idx": step_id}, "id": graph_id, "ts": t + 10, "dur": 300})
        for k, name in enumerate(("function.addmm.default", "function.relu.default")):
            events.append({"name": name, "cat": "dynamo", "pid": pid, "tid": pid, "ph": "X",
                           "args": {"grad_enabled": 1, "level": 3, "p_idx": graph_id}, "id": graph_id + 1 + k, "ts": t + 20 + 100 * k, "dur": 90})
        events.append({"name": "step", "cat": "train", "pid": pid, "tid": pid, "ph": "X",
                       "args": {"hhash": hh, "epoch": 0, "step": c, "level": 1, "p_idx": -1}, "id": step_id, "ts": t, "dur": 400})
        ident += 4
    events.append({"id": ident, "name": "end", "cat": "dftracer", "pid": pid, "tid": pid, "ts": 9000, "dur": 0, "ph": "X", "args": {"hhash": hh, "dropped": 0}})
    return events  # fmt: skip


def _ours_text() -> str:
    return "[\n" + "".join(_line(e) + "\n" for e in ours())


OURS_ROWS = sum(1 for e in ours() if e["ph"] == "X")


# ---------------------------------------------------------------------------- the set


@dataclass(frozen=True)
class Case:
    name: str
    file_name: str
    write: Callable[[Path], None]
    rows: int  # rows read_trace gives
    dropped_lines: int = 0


def _text(text: str) -> Callable[[Path], None]:
    return lambda p: p.write_text(text)


def _gz(text: str) -> Callable[[Path], None]:
    return lambda p: p.write_bytes(gzip.compress(text.encode(), mtime=0))


def _corrupt_middle() -> str:
    lines = _ours_text().splitlines(keepends=True)
    return "".join([*lines[:9], '{"id":99,"name":"bro\n', *lines[9:]])


def _truncated(p: Path) -> None:
    """Killed while writing: the last gzip member is cut inside its data."""
    lines = _ours_text().splitlines(keepends=True)
    whole = gzip.compress("".join(lines[:12]).encode(), mtime=0)
    last = gzip.compress("".join(lines[12:]).encode(), mtime=0)
    p.write_bytes(whole + last[: len(last) // 2])


CASES = [
    Case("ours", "t-31.pfw", _text(_ours_text()), OURS_ROWS),
    Case("ours-gz", "t-31.pfw.gz", _gz(_ours_text()), OURS_ROWS),
    Case("torn-last-line", "torn.pfw", _text(_ours_text() + _line(ours()[6])[:30]), OURS_ROWS, dropped_lines=1),
    Case("corrupt-middle-line", "mid.pfw", _text(_corrupt_middle()), OURS_ROWS, dropped_lines=1),
    Case("truncated-gzip", "cut.pfw.gz", _truncated, -1),  # rows: whatever whole lines precede the cut
    Case("pydftracer-integer-ph", "a-9108f9e6e4763325-app.pfw", _text(GEN_C), 4),
    Case("pydftracer-integer-ph-gz", "trace-0123456789abcdef-app.pfw.gz", _gz(GEN_C_NO_ARGS), 4),
    Case("pydftracer-brackets", "app-python-10264-1.pfw", _text(GEN_A), 2),
    Case("torch-profiler", "host_4242.pt.trace.json", _text(json.dumps(PROFILER, indent=1)), 3),
    Case("torch-profiler-gz", "host_4242.pt.trace.json.gz", _gz(json.dumps(PROFILER, indent=1)), 3),
    Case("chrome-array", "t.json", _text(json.dumps(PROFILER["traceEvents"])), 3),
    Case("begin-end-pairs", "steps.json", _text(json.dumps({"traceEvents": begin_end_events(25)})), 50),
]
CASE_IDS = [c.name for c in CASES]


def write_case(case: Case, directory: Path) -> Path:
    path = directory / case.file_name
    case.write(path)
    return path
