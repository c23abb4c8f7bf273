"""A trace written event by event as dynascope's writer writes frame probes and graph calls
(docs/trace-format.md, "Frames and graph breaks"), so that every number the graph-break join gives is
known: for the analysis and rendering tests. Torch-free."""

from __future__ import annotations

import json

FILE = "/src/model.py"


class Trace:
    """One thread's events, written as dynascope writes them."""

    def __init__(self, pid: int = 7):
        self.pid = pid
        self.lines = ["["]
        self.next_id = 2
        self.refs: dict[str, int] = {}

    def _oh(self, key: str, attrs: dict) -> int:
        if key not in self.refs:
            value = self.refs[key] = len(self.refs) + 1
            args = {"hhash": "0000000000000001", "value": value, "hash": f"{value:016x}", **attrs}
            self.lines.append(json.dumps({"name": "OH", "cat": "dynascope", "pid": self.pid, "tid": self.pid,
                                          "ph": "M", "args": args}))
        return self.refs[key]

    def _event(self, name: str, cat: str, ts: int, dur: int, op: int) -> None:
        args = {"hhash": "0000000000000001", "op": op, "level": 1, "p_idx": -1}
        self.lines.append(json.dumps({"name": name, "cat": cat, "pid": self.pid, "tid": self.pid, "ph": "X",
                                      "args": args, "id": self.next_id, "ts": ts, "dur": dur}))
        self.next_id += 1

    def frame(self, probe: str, ts: int, cid: str, function: str = "forward", line: int = 10, resume: int = 0,
              breaks: int = 0, break_at: int | None = None, reason: str | None = None, code: str | None = None):
        name = f"torch_dynamo_resume_in_{function}_at_{line}" if resume else function
        attrs = {"kind": "frame", "compile_id": cid, "function": function, "qualname": f"M.{name}", "file": FILE,
                 "line": line, "resume": resume, "graphs": 1, "breaks": breaks, "probe": probe}
        if breaks and break_at:
            attrs.update({"break_line": break_at, "reason": reason, "break_file": FILE, "break_at": break_at,
                          "break_code": code})
        self._event(f"{name} [{cid}]", "dynamo.frame", ts, 0, self._oh(f"f{cid}{probe}", attrs))

    def call(self, probe: str, ts: int, function: str = "forward", line: int = 10):
        attrs = {"kind": "call", "function": function, "qualname": f"M.{function}", "file": FILE, "line": line,
                 "probe": probe}
        self._event(f"M.{function}", "dynamo.call", ts, 0, self._oh(f"c{function}{probe}", attrs))

    def graph(self, ts: int, dur: int, cid: str, n: int, phase: str = "forward"):
        attrs = {"kind": "graph", "compile_id": cid, "graph": f"__compiled_fn_{n}", "phase": phase, "n_ops": 0}
        self._event(f"__compiled_fn_{n}.{phase}", "dynamo.graph", ts, dur, self._oh(f"g{n}{phase}", attrs))

    def compile(self, ts: int, dur: int, cid: str):
        self.lines.append(json.dumps({"name": "entire_frame_compile", "cat": "dynamo.compile", "pid": self.pid,
                                      "tid": self.pid, "ph": "X", "id": self.next_id, "ts": ts, "dur": dur,
                                      "args": {"compile_id": cid, "p_idx": -1, "level": 1}}))
        self.next_id += 1

    def one_break_call(self, t: int, helper_us: int):
        """A call of M.forward: its frame 0/0 runs graph 1, breaks at line 12 (the helper), and its resume
        function 1/0 runs graph 2. The break's region: graph 1's end to graph 2's start."""
        self.call("enter", t)
        self.frame("enter", t + 10, "0/0", breaks=1, break_at=12, reason="Skip calling `torch.compiler.disable()`d function",
                   code="x = helper(x)")
        self.graph(t + 20, 10, "0/0", 1)
        self.frame("enter", t + 30 + helper_us, "1/0", line=12, resume=1)
        self.graph(t + 40 + helper_us, 10, "1/0", 2)
        self.frame("exit", t + 60 + helper_us, "1/0", line=12, resume=1)
        self.frame("exit", t + 65 + helper_us, "0/0", breaks=1, break_at=12,
                   reason="Skip calling `torch.compiler.disable()`d function", code="x = helper(x)")
        self.call("exit", t + 70 + helper_us)

    def write(self, tmp_path, name: str = "t-7.pfw"):
        path = tmp_path / name
        path.write_text("\n".join(self.lines) + "\n")
        return path
