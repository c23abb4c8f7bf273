"""Test helpers: read a trace file line by line, independently of dynascope's reader, and check
every invariant of docs/trace-format.md."""

from __future__ import annotations

import glob
import gzip
import json
import os
import sys
import zlib
from collections import defaultdict
from pathlib import Path

from support import procs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def raw_text(path: str) -> str:
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as handle:
            return handle.read().decode()
    with open(path) as handle:
        return handle.read()


def readable_prefix(path: str) -> tuple[list[str], bool]:
    """Lines from every whole gzip member (or every whole line), and whether the file was cut short."""
    data = Path(path).read_bytes()
    if not path.endswith(".gz"):
        text = data.decode(errors="replace")
        cut = not text.endswith("\n")
        lines = text.split("\n")
        return lines[:-1], cut  # a cut file's last piece is partial, a whole one's is empty
    lines: list[str] = []
    while data:
        decompressor = zlib.decompressobj(31)
        try:
            text = decompressor.decompress(data)
        except zlib.error:
            return lines, True
        if not decompressor.eof:
            return lines, True
        lines.extend(text.decode().split("\n")[:-1])
        data = decompressor.unused_data
    return lines, False


def load(path: str) -> list[dict]:
    lines = raw_text(path).split("\n")
    assert lines[0] == "[", f"{path}: the first line must be '[', got {lines[0][:40]!r}"
    return [json.loads(line) for line in lines[1:] if line.strip()]


def trace_files(directory: str, pattern: str = "*.pfw*") -> list[str]:
    return sorted(glob.glob(os.path.join(directory, pattern)))


def check(records: list[dict], complete: bool = True) -> dict:
    """Assert the format's invariants; return an index of the trace for further assertions."""
    graphs_by_ref = {}  # OH value -> graph attribution
    ops_by_position = {}  # (graph OH value, index) -> op attribution
    by_id = {}
    sources = {}  # KS value -> kernel code
    events = []
    counters = []  # memory samples (trace/memory.py)
    for record in records:
        assert isinstance(record["ph"], str) and record["ph"] in ("X", "M", "C"), record
        for key in ("name", "cat", "pid", "tid"):
            assert key in record, (key, record)
        if record["ph"] == "C":
            assert record["cat"] == "memory" and isinstance(record["ts"], int), record
            assert record["args"] and all(isinstance(v, int) and v >= 0 for v in record["args"].values()), record
            counters.append(record)
            continue
        if record["ph"] == "M":
            if record["name"] == "KS":
                sources[record["args"]["value"]] = record["args"]["text"]
            if record["name"] == "OH":
                args = record["args"]
                if "kernel_code" in args:
                    assert args["kernel_code"] in sources, f"kernel OH record before its KS record: {args}"
                if "graph_op" in args:
                    ops_by_position[(args["graph_op"], args["index"])] = args
                else:
                    graphs_by_ref[args["value"]] = args
            continue
        assert isinstance(record["ts"], int) and isinstance(record["dur"], int) and record["dur"] >= 0, record
        assert isinstance(record["id"], int) and record["id"] not in by_id, record
        by_id[record["id"]] = record
        if record["cat"] == "dynamo.graph" and "op" in record["args"]:
            assert record["args"]["op"] in graphs_by_ref, f"graph event before its OH record: {record}"
        if record["cat"] == "dynamo" and "layer" not in record["args"]:  # attribution by reference
            parent = by_id[record["args"]["p_idx"]]
            key = (parent["args"]["op"], record["id"] - parent["id"] - 1)
            assert key in ops_by_position, f"op event with no OH record at {key}: {record}"
            record["_attrs"] = ops_by_position[key]
        elif record["cat"] == "dynamo.graph" and "op" in record["args"]:
            record["_attrs"] = graphs_by_ref[record["args"]["op"]]
        events.append(record)
    names = [e["name"] for e in events]
    assert names[0] == "start", names[:3]
    if complete:
        assert names[-1] == "end", names[-3:]
        assert events[-1]["args"]["num_events"] == len(events) - 1
    _check_nesting(events)
    return {"events": events, "ops": ops_by_position, "graphs": graphs_by_ref, "sources": sources,
            "counters": counters}


def _check_nesting(events: list[dict]) -> None:
    """Complete events on one thread nest: none partially overlaps another (Perfetto drops those)."""
    by_thread = defaultdict(list)
    for event in events:
        if event["name"] in ("start", "end"):
            continue
        by_thread[(event["pid"], event["tid"])].append(event)
    for thread_events in by_thread.values():
        thread_events.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[int] = []
        for event in thread_events:
            start, end = event["ts"], event["ts"] + event["dur"]
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1], f"partial overlap at {event}"
            stack.append(end)


def op_events(index: dict, cat: str = "dynamo") -> list[dict]:
    return [e for e in index["events"] if e["cat"] == cat]


def attrs(index: dict, event: dict) -> dict:
    """An op or graph event's attribution, resolved through OH records (or inline in its args)."""
    return event.get("_attrs", event["args"])


def run_script(path: str, cwd: str, env: dict | None = None, args: list[str] | None = None, timeout: int = 600):
    full_env = {**os.environ, **(env or {})}
    return procs.run(
        [sys.executable, path, *(args or [])], cwd=cwd, env=full_env, capture_output=True, check=False, text=True, timeout=timeout
    )
