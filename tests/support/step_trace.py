"""Synthetic traces with the whole training step's events (the issue-15 event spec: dataloader, autograd,
optimizer, torch.io, POSIX), for the analysis and render tests.

Op events and graph calls are written in the writer's exact line layout (trace/format.py), so the fast
path's scanner takes them; every other event is a complete event as the decoder writes it. A training
process is laid out iteration by iteration as segments one after another, each known to belong to one
part, so the expected parts of every step are the segments' sums (`Loop.expected`).
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

from dynascope.trace import format as layout

HH = "9c1185a5c5e9fc54"
T0 = 1_795_294_435_000_000
PARTS = ("data", "forward", "backward", "optimizer", "io", "compile", "other")


def _dumps(o: dict) -> str:
    return json.dumps(o, separators=(",", ":"))


class Trace:
    """One process's file: metadata, a start record, events, an end record."""

    def __init__(self, pid: int, *, ppid: int = 1, tid: int | None = None, host: str = "node17"):
        self.pid, self.tid = pid, tid if tid is not None else pid
        self.lines: list[str] = []
        self.next_id = 1
        self.oh = 0
        self.files: dict[str, str] = {}
        self.graphs: dict[tuple, int] = {}
        self.meta("HH", {"hhash": HH, "name": host, "value": HH})
        self.meta("thread_name", {"hhash": HH, "name": "MainThread", "value": "thread_name"})
        self.event("start", "dftracer", T0 - 1000, 0, {"ppid": ppid, "rank": -1, "world_size": 1, "local_rank": -1})

    def _id(self, n: int = 1) -> int:
        first = self.next_id
        self.next_id += n
        return first

    def meta(self, name: str, args: dict, cat: str = "dftracer") -> None:
        self.lines.append(_dumps({"name": name, "cat": cat, "pid": self.pid, "tid": self.pid, "ph": "M", "args": args}))

    def fh(self, path: str) -> str:
        """The FH hash of a path (its record written before first use)."""
        if path not in self.files:
            value = f"{len(self.files) + 1:016x}"
            self.meta("FH", {"hhash": HH, "name": path, "value": value})
            self.files[path] = value
        return self.files[path]

    def event(self, name: str, cat: str, ts: int, dur: int, args: dict | None = None, tid: int | None = None) -> int:
        ident = self._id()
        a = {"hhash": HH, **(args or {}), "level": 1, "p_idx": -1}
        self.lines.append(_dumps({
            "id": ident, "name": name, "cat": cat, "pid": self.pid, "tid": self.tid if tid is None else tid,
            "ts": ts, "dur": dur, "ph": "X", "args": a,
        }))  # fmt: skip
        return ident

    def _graph_oh(self, phase: str, compile_id: str, n_ops: int) -> int:
        key = (phase, compile_id, n_ops)
        if key not in self.graphs:
            self.oh += 1
            g = self.oh
            graph = f"__compiled_fn_{compile_id.split('/', maxsplit=1)[0]}"
            self.meta("OH", {"hhash": HH, "value": g, "hash": f"{g:016x}", "kind": "graph", "compile_id": compile_id,
                             "graph": graph, "phase": phase, "backend": "aot_eager", "n_ops": n_ops}, cat="dynascope")  # fmt: skip
            for k in range(n_ops):
                self.oh += 1
                self.meta("OH", {
                    "hhash": HH, "value": self.oh, "hash": f"{self.oh:016x}", "graph_op": g, "index": k, "kind": "op",
                    "compile_id": compile_id, "graph": graph, "phase": phase, "node": f"n{k}", "op_type": "call_function",
                    "target": f"aten.op{k}", "layer": f"layers.{k}", "module_type": "Linear", "file": "train.py",
                    "line": 10 + k, "code": "x = f(x)", "backend": "aot_eager",
                }, cat="dynascope")  # fmt: skip
            self.graphs[key] = g
        return self.graphs[key]

    def graph_call(self, phase: str, ts: int, dur: int, compile_id: str = "0/0", n_ops: int = 2) -> None:
        """A graph call with its op events (each op 1 µs, one after another from ts + 1)."""
        g = self._graph_oh(phase, compile_id, n_ops)
        gid = self._id(1 + n_ops)
        grad = 0 if phase == "inference" else 1
        self.lines.append(
            (layout.head(json.dumps(f"__compiled_fn_{compile_id.split('/', maxsplit=1)[0]}.{phase}"), layout.GRAPH_CAT, self.pid,
                         self.tid, grad, 1, hhash=HH, attribution=f"{layout.OP}{g}") + layout.tail(-1, gid, ts, dur))[:-1]
        )  # fmt: skip
        for k in range(n_ops):
            self.lines.append(
                (layout.head(json.dumps(f"function.op{k}.default"), layout.OP_CAT, self.pid, self.tid, grad, 2)
                 + layout.tail(gid, gid + 1 + k, ts + 1 + k, 1))[:-1]
            )  # fmt: skip

    def end(self, ts: int) -> None:
        self.event("end", "dftracer", ts, 0, {"num_events": self.next_id, "dropped": 0})

    def text(self) -> str:
        return "[\n" + "".join(line + "\n" for line in self.lines)

    def write(self, path: Path, *, gz: bool = False, per_member: int = 40) -> Path:
        text = self.text().encode()
        if gz:
            lines = text.splitlines(keepends=True)
            text = b"".join(
                gzip.compress(b"".join(lines[i : i + per_member]), compresslevel=1)
                for i in range(0, len(lines), per_member)
            )
        path.write_bytes(text)
        return path


@dataclass
class Loop:
    """A training loop on one thread of `trace`, laid out segment by segment from `t`. Each iteration's
    parts are recorded in `iterations` (one dict per iteration, µs per part) as it is written."""

    trace: Trace
    t: int = T0
    iterations: list[dict[str, int]] = field(default_factory=list)
    loader: int = 1
    batch: int = 0
    # parts laid out after an iteration's optimizer step: they belong to the next iteration's step
    carry: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PARTS, 0))

    def _new(self) -> dict[str, int]:
        parts, self.carry = self.carry, dict.fromkeys(PARTS, 0)
        self.iterations.append(parts)
        return parts

    def gap(self, us: int, parts: dict[str, int]) -> None:
        self.t += us
        parts["other"] += us

    def data(self, us: int, parts: dict[str, int]) -> None:
        self.trace.event("dataloader.next", "dataloader", self.t, us, {"loader": self.loader, "batch": self.batch,
                                                                        "workers": 2})  # fmt: skip
        self.batch += 1
        self.t += us
        parts["data"] += us

    def forward(self, parts: dict[str, int], *, compile_us: int = 0, compile_id: str = "0/0", mid_compile: int = 0,
                mid_compile_id: str = "1/0") -> None:  # fmt: skip
        """A compile (when `compile_us`), then two graph calls of 20 and 10 µs with 4 µs of eager code
        between them; a compile of `mid_compile` µs inside that gap (a graph break compiling its second
        graph: inside the forward run, it counts as compile)."""
        if compile_us:
            self.trace.event("entire_frame_compile", "dynamo.compile", self.t, compile_us, {"compile_id": compile_id})
            self.t += compile_us
            parts["compile"] += compile_us
        self.trace.graph_call("forward", self.t, 20, compile_id=compile_id)
        self.t += 20
        if mid_compile:
            self.t += 1
            self.trace.event(
                "entire_frame_compile", "dynamo.compile", self.t, mid_compile, {"compile_id": mid_compile_id}
            )
            self.t += mid_compile + 3
            parts["compile"] += mid_compile
            parts["forward"] += 4
        else:
            self.t += 4
            parts["forward"] += 4
        self.trace.graph_call("forward", self.t, 10, compile_id=mid_compile_id if mid_compile else compile_id)
        self.t += 10
        parts["forward"] += 30

    def backward(self, parts: dict[str, int], us: int = 40) -> None:
        """A backward region with a backward graph call inside it."""
        self.trace.event("backward", "autograd", self.t, us)
        self.trace.graph_call("backward", self.t + 5, us - 10, n_ops=3)
        self.t += us
        parts["backward"] += us

    def zero_grad(self, parts: dict[str, int], opt: int = 1, us: int = 4) -> None:
        self.trace.event("optimizer.zero_grad", "optimizer", self.t, us, {"optimizer": "Adam", "opt": opt})
        self.t += us
        parts["optimizer"] += us

    def step(self, parts: dict[str, int], opt: int = 1, us: int = 15, name: str = "Adam") -> None:
        self.trace.event("optimizer.step", "optimizer", self.t, us, {"optimizer": name, "opt": opt})
        self.t += us
        parts["optimizer"] += us

    def save(self, parts: dict[str, int], path: str, us: int = 30) -> None:
        """torch.save to `path`, with two raw writes inside it."""
        fh = self.trace.fh(path)
        self.trace.event("torch.save", "torch.io", self.t, us, {"fhash": fh, "bytes": 4096})
        for k in range(2):
            self.trace.event("write", "POSIX", self.t + 2 + 10 * k, 5, {"fhash": fh, "fd": 7, "ret": 2048})
        self.t += us
        parts["io"] += us

    def read(self, parts: dict[str, int], path: str, us: int = 6) -> None:
        fh = self.trace.fh(path)
        self.trace.event("read", "POSIX", self.t, us, {"fhash": fh, "fd": 5, "ret": 100})
        self.t += us
        parts["io"] += us

    def iteration(self, *, data: int = 50, compile_us: int = 0, compile_id: str = "0/0", mid_compile: int = 0,
                  mid_compile_id: str = "1/0", backward: int = 40, save: str | None = None, lead: int = 5,
                  opt: int = 1, zero_grad: bool = True, step: bool = True) -> dict[str, int]:  # fmt: skip
        """One iteration: [lead gap] next, gap 3, zero_grad, forward, gap 2, backward, gap 2, step [, save]."""
        parts = self._new()
        self.gap(lead, parts)
        self.data(data, parts)
        self.gap(3, parts)
        if zero_grad:
            self.zero_grad(parts, opt=opt)
        self.forward(parts, compile_us=compile_us, compile_id=compile_id, mid_compile=mid_compile,
                     mid_compile_id=mid_compile_id)  # fmt: skip
        self.gap(2, parts)
        self.backward(parts, backward)
        self.gap(2, parts)
        if step:
            self.step(parts, opt=opt)
        if save is not None:
            self.save(parts, save)
        return parts


def parts_of(row: dict) -> dict[str, int]:
    return {p: row[f"{p}_us"] for p in PARTS}


def training_trace(pid: int = 4242, steps: int = 8, *, slow_data: int | None = 5, recompile: int | None = 6,
                   save_after: int | None = 3) -> tuple[Trace, list[dict[str, int]]]:  # fmt: skip
    """A plain loop: compile in step 0, a data stall in step `slow_data`, a recompile in step `recompile`
    (a graph break's second graph compiled again as 0/1), a checkpoint saved after step `save_after` (its
    I/O falls in the next step). Returns the trace and the expected parts of each automatic step."""
    tr = Trace(pid)
    loop = Loop(tr)
    for k in range(steps):
        loop.iteration(
            lead=0 if k == 0 else 5,
            data=2000 if k == slow_data else 50,
            compile_us=900 if k == 0 else 0,
            mid_compile=700 if k == recompile else 0,
            mid_compile_id="0/1" if k == recompile else "1/0",
        )
        if k == save_after:
            loop.save(loop.carry, f"/tmp/run/ckpt-{k}.pt")
    tr.end(loop.t + 10)
    return tr, loop.iterations


def worker_trace(pid: int, ppid: int, worker: int, batches: list[int], t: int, *, loader: int = 1,
                 every: int = 60) -> Trace:  # fmt: skip
    """A DataLoader worker: one dataloader.fetch per batch (a read inside each), every `every` µs from t."""
    tr = Trace(pid, ppid=ppid)
    for b in batches:
        tr.event("dataloader.fetch", "dataloader", t, 40, {"loader": loader, "batch": b, "worker": worker})
        tr.event("read", "POSIX", t + 5, 10, {"fhash": tr.fh(f"/data/sample-{b}.pt"), "fd": 3, "ret": 512})
        t += every
    tr.end(t)
    return tr
