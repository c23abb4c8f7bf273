"""Hand-written traces in dynascope's format (docs/trace-format.md) for the analysis tests.

The two-process trace below is small enough to summarise by hand; test_summarize.py holds the numbers.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

HA = "aaaaaaaaaaaaaaaa"
HB = "bbbbbbbbbbbbbbbb"
OP_ADDMM = "0000000000000001"
OP_RELU = "0000000000000002"
OP_MM_BWD = "0000000000000003"
G_FWD = "000000000000000a"
G_BWD = "000000000000000b"


def line(obj: dict) -> str:
    return json.dumps(obj, separators=(",", ":"))


def meta(name: str, pid: int, args: dict, cat: str = "dftracer") -> dict:
    return {"name": name, "cat": cat, "pid": pid, "tid": pid, "ph": "M", "args": args}


def x(i: int, name: str, cat: str, pid: int, ts: int, dur: int, args: dict, tid: int | None = None) -> dict:
    return {"id": i, "name": name, "cat": cat, "pid": pid, "tid": pid if tid is None else tid, "ts": ts, "dur": dur, "ph": "X", "args": args}


def oh_records(pid: int, hh: str) -> list[dict]:
    common = {"compile_id": "0/0", "graph": "__compiled_fn_1", "backend": "aot_eager", "file": "train.py"}

    def oh(value, **kw):
        return meta("OH", pid, {"hhash": hh, "value": value, **common, **kw}, cat="dynascope")

    return [
        oh(OP_ADDMM, kind="op", phase="forward", node="addmm", op_type="call_function", target="aten.addmm.default", layer="fc1", module_type="Linear", line=14, code="x = self.fc1(x)"),
        oh(OP_RELU, kind="op", phase="forward", node="relu", op_type="call_function", target="aten.relu.default", layer="act", module_type="ReLU", line=15, code="x = self.act(x)"),
        oh(OP_MM_BWD, kind="op", phase="backward", node="mm", op_type="call_function", target="aten.mm.default", layer="fc1", module_type="Linear", line=14, code="x = self.fc1(x)"),
        oh(G_FWD, kind="graph", phase="forward", n_ops=2),
        oh(G_BWD, kind="graph", phase="backward", n_ops=1),
    ]


def op(i, name, pid, ts, dur, ref, hh, p_idx=-1, level=1):
    return x(i, name, "dynamo", pid, ts, dur, {"hhash": hh, "p_idx": p_idx, "level": level, "grad_enabled": 1, "op": ref})


def process_a() -> list[dict]:
    """pid 100 on nodeA, rank 0 of 2: compile, an epoch with two steps, graphs and ops."""
    pid, hh = 100, HA
    return [
        meta("HH", pid, {"hhash": hh, "name": "nodeA", "value": hh}),
        meta("thread_name", pid, {"hhash": hh, "name": "MainThread", "value": "thread_name"}),
        x(1, "start", "dftracer", pid, 900, 0, {"hhash": hh, "ppid": 1, "rank": 0, "world_size": 2, "local_rank": 0}),
        *oh_records(pid, hh),
        # compile: 0/0 = [1000,1500] with a nested phase, 1/0 = [1600,1700]
        x(3, "dynamo", "dynamo.compile", pid, 1100, 200, {"hhash": hh, "compile_id": "0/0", "p_idx": 2, "level": 2}),
        x(2, "entire_frame_compile", "dynamo.compile", pid, 1000, 500, {"hhash": hh, "compile_id": "0/0", "p_idx": -1, "level": 1}),
        x(4, "entire_frame_compile", "dynamo.compile", pid, 1600, 100, {"hhash": hh, "compile_id": "1/0", "p_idx": -1, "level": 1}),
        # step 0 of epoch 0: [2000, 2400]
        op(7, "function.addmm.default", pid, 2020, 30, OP_ADDMM, hh, 6, 4),
        op(8, "function.relu.default", pid, 2060, 10, OP_RELU, hh, 6, 4),
        x(6, "__compiled_fn_1.forward", "dynamo.graph", pid, 2010, 100, {"hhash": hh, "p_idx": 5, "level": 3, "grad_enabled": 1, "op": G_FWD}),
        op(10, "function.mm.default", pid, 2210, 50, OP_MM_BWD, hh, 9, 4),
        x(9, "__compiled_fn_1.backward", "dynamo.graph", pid, 2200, 100, {"hhash": hh, "p_idx": 5, "level": 3, "grad_enabled": 1, "op": G_BWD}),
        x(5, "step", "train", pid, 2000, 400, {"hhash": hh, "p_idx": 11, "level": 2, "epoch": 0, "step": 0}),
        # between the steps: only the epoch region holds it
        op(12, "function.relu.default", pid, 2450, 20, OP_RELU, hh, 11, 2),
        # step 1: [2500, 2900]
        op(15, "function.addmm.default", pid, 2520, 40, OP_ADDMM, hh, 14, 4),
        op(16, "function.relu.default", pid, 2570, 10, OP_RELU, hh, 14, 4),
        x(14, "__compiled_fn_1.forward", "dynamo.graph", pid, 2510, 80, {"hhash": hh, "p_idx": 13, "level": 3, "grad_enabled": 1, "op": G_FWD}),
        op(18, "function.mm.default", pid, 2710, 60, OP_MM_BWD, hh, 17, 4),
        x(17, "__compiled_fn_1.backward", "dynamo.graph", pid, 2700, 90, {"hhash": hh, "p_idx": 13, "level": 3, "grad_enabled": 1, "op": G_BWD}),
        x(13, "step", "train", pid, 2500, 400, {"hhash": hh, "p_idx": 11, "level": 2, "epoch": 0, "step": 1}),
        x(11, "epoch", "train", pid, 2000, 1000, {"hhash": hh, "p_idx": -1, "level": 1, "epoch": 0}),
        x(19, "end", "dftracer", pid, 3000, 0, {"hhash": hh, "num_events": 18, "dropped": 0, "used": {"dynamo": 1}}),
    ]


def process_b() -> list[dict]:
    """pid 200 on nodeB, rank 1 of 2: one compile, one forward call, no regions."""
    pid, hh = 200, HB
    return [
        meta("HH", pid, {"hhash": hh, "name": "nodeB", "value": hh}),
        x(1, "start", "dftracer", pid, 3900, 0, {"hhash": hh, "ppid": 1, "rank": 1, "world_size": 2, "local_rank": 1}),
        *oh_records(pid, hh),
        x(2, "entire_frame_compile", "dynamo.compile", pid, 4000, 300, {"hhash": hh, "compile_id": "0/0", "p_idx": -1, "level": 1}),
        op(4, "function.addmm.default", pid, 5010, 20, OP_ADDMM, hh, 3, 2),
        op(5, "function.addmm.default", pid, 5040, 20, OP_ADDMM, hh, 3, 2),
        x(3, "__compiled_fn_1.forward", "dynamo.graph", pid, 5000, 70, {"hhash": hh, "p_idx": -1, "level": 1, "grad_enabled": 1, "op": G_FWD}),
        x(6, "end", "dftracer", pid, 5200, 0, {"hhash": hh, "num_events": 5, "dropped": 2, "used": {"dynamo": 1}}),
    ]


def write_pfw(path: Path, events: list[dict], *, gz: bool = False, bracket: bool = True, members: int = 1) -> Path:
    text = ("[\n" if bracket else "") + "".join(line(e) + "\n" for e in events)
    if not gz:
        path.write_text(text)
        return path
    data = text.encode()
    lines = data.splitlines(keepends=True)
    per = max(1, -(-len(lines) // members))
    out = b"".join(gzip.compress(b"".join(lines[i : i + per]), compresslevel=1) for i in range(0, len(lines), per))
    path.write_bytes(out)
    return path


def write_two_process_trace(directory: Path, gz: bool = True) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    ext = ".pfw.gz" if gz else ".pfw"
    return [
        write_pfw(directory / f"trace-100{ext}", process_a(), gz=gz, members=3),
        write_pfw(directory / f"trace-200{ext}", process_b(), gz=gz, members=2),
    ]
