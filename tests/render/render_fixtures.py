"""Test data for the render tests: a Summary with known numbers and a small, real-looking trace file.

The trace follows docs/trace-format.md: `[` line, HH / thread_name / process_name / OH metadata,
start and end records, compile events, user regions (epoch, step), compiled-graph calls and the op
events nested inside them. One layer and one file name carry HTML, to test escaping end to end.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import polars as pl

from dynascope.analyze.summary import Summary

EVIL = "<script>alert('x')</script>"
T0 = 1_795_294_435_000_000


def make_summary(top: int = 20) -> Summary:
    by_op = pl.DataFrame(
        {
            "name": ["function.addmm.default", "function.relu.default", f"{EVIL}.Linear_addmm", "function.mm.default"],
            "cat": ["dynamo"] * 4,
            "count": [4, 2, 2, 2],
            "total_us": [4000.0, 1000.0, 600.0, 400.0],
            "mean_us": [1000.0, 500.0, 300.0, 200.0],
            "p50_us": [900.0, 500.0, 300.0, 200.0],
            "p95_us": [1500.0, 550.0, 320.0, 210.0],
            "share": [4000 / 6000, 1000 / 6000, 600 / 6000, 400 / 6000],
        }
    )
    by_layer = pl.DataFrame(
        {
            "layer": ["fc1", EVIL, "act"],
            "module_type": ["Linear", "Evil</td>", "ReLU"],
            "count": [6, 2, 2],
            "total_us": [4400.0, 600.0, 1000.0],
            "forward_us": [4000.0, 600.0, 1000.0],
            "backward_us": [400.0, 0.0, 0.0],
            "share": [4400 / 6000, 600 / 6000, 1000 / 6000],
        }
    )
    by_phase = pl.DataFrame(
        {
            "phase": ["forward", "backward"],
            "count": [8, 2],
            "total_us": [5600.0, 400.0],
            "share": [5600 / 6000, 400 / 6000],
        }
    )
    by_graph = pl.DataFrame(
        {
            "compile_id": ["0/0", "0/0"],
            "graph": ["__compiled_fn_1", "__compiled_fn_1"],
            "phase": ["forward", "backward"],
            "calls": [2, 2],
            "ops_per_call": [4.0, 1.0],
            "total_us": [7000.0, 900.0],
            "mean_call_us": [3500.0, 450.0],
        }
    )
    by_step = pl.DataFrame(
        {
            "epoch": [0, 0],
            "step": [0, 1],
            "total_us": [5000.0, 4000.0],
            "op_us": [3200.0, 2800.0],
            "op_count": [5, 5],
        }
    )
    by_process = pl.DataFrame(
        {
            "pid": [4242],
            "host": ["node17"],
            "rank": [-1],
            "events": [20],
            "op_us": [6000.0],
            "compile_us": [50000.0],
        }
    )
    compile_vs_run = pl.DataFrame(
        {
            "kind": ["compile", "run"],
            "compile_id": ["0/0", None],
            "total_us": [50000.0, 10000.0],
            "share": [50000 / 60000, 10000 / 60000],
        }
    )
    return Summary(
        by_op=by_op,
        by_layer=by_layer,
        by_phase=by_phase,
        by_graph=by_graph,
        by_step=by_step,
        by_process=by_process,
        compile_vs_run=compile_vs_run,
        top=top,
        meta={
            "files": [f"/tmp/{EVIL}/trace-4242.pfw.gz"],
            "events": 20,
            "ops": 10,
            "span_us": 70000,
            "dropped_lines": 0,
            "warnings": [],
        },
    )


class TraceBuilder:
    """Writes one process's trace in dynascope's format, tracking ids, levels and p_idx."""

    def __init__(self, pid: int, host: str = "node17", rank: int = -1, inline: bool = False, positional: bool = False):
        self.pid = pid
        self.tid = pid
        self.host = host
        self.rank = rank
        self.inline = inline
        # positional: OH `value` is a small integer (plus `hash`), op OH records carry `graph_op` and
        # `index`, and op events carry no `op`: op k of a graph call has id = p_idx + 1 + k
        self.positional = positional
        self.graph_keys: dict[str, str] = {}
        self.hhash = "9c1185a5c5e9fc54"
        self.lines: list[dict] = []
        self.next_id = 1
        self.ops: dict[str, dict] = {}
        self.n_events = 0

    def meta(self, name: str, args: dict, cat: str = "dftracer") -> None:
        self.lines.append({"name": name, "cat": cat, "pid": self.pid, "tid": self.tid, "ph": "M", "args": {"hhash": self.hhash, **args}})

    def oh(self, key: str, of_graph: str | None = None, at: int | None = None, **fields) -> str:
        digest = f"{abs(hash((self.pid, key))) % (1 << 64):016x}"
        value = len(self.ops) + 1 if self.positional else digest
        self.ops[key] = {"value": value, **fields}
        if not self.inline:
            record = {"value": value, **fields}
            if self.positional:
                record["hash"] = digest
                if of_graph is not None:
                    record.update(graph_op=self.ops[of_graph]["value"], index=at)
                    self.graph_keys[key] = of_graph
            self.meta("OH", record, cat="dynascope")
        return value

    def event(self, name: str, cat: str, ts: int, dur: int, parent: dict | None = None, op: str | None = None, **args) -> dict:
        rec = {
            "id": self.next_id,
            "name": name,
            "cat": cat,
            "pid": self.pid,
            "tid": self.tid,
            "ts": ts,
            "dur": dur,
            "ph": "X",
            "args": {
                "hhash": self.hhash,
                "p_idx": parent["id"] if parent else -1,
                "level": parent["args"]["level"] + 1 if parent else 1,
                **args,
            },
        }
        if op is not None:
            fields = self.ops[op]
            rec["args"]["grad_enabled"] = 1
            if self.inline:
                rec["args"].update({k: v for k, v in fields.items() if k != "value"})
            elif self.positional and op in self.graph_keys:
                assert rec["id"] == parent["id"] + 1 + [k for k, g in self.graph_keys.items() if g == self.graph_keys[op]].index(op)
            else:
                rec["args"]["op"] = fields["value"]
        self.next_id += 1
        if name not in ("start", "end"):
            self.n_events += 1
        self.lines.append(rec)
        return rec

    def write(self, path: Path) -> Path:
        body = b"[\n" + b"".join(orjson.dumps(line) + b"\n" for line in self.lines)
        if str(path).endswith(".gz"):
            path.write_bytes(gzip.compress(body, compresslevel=1))
        else:
            path.write_bytes(body)
        return path


def build_trace(
    pid: int = 4242, rank: int = -1, inline: bool = False, steps: int = 2, file_name: str = "train.py", positional: bool = False
) -> TraceBuilder:
    """A training run: compile 0/0 (50 ms), then `steps` steps of forward (3 ops) + backward (2 ops).

    Per step (relative to the step start s): forward graph call [s+100, s+2100), ops
    addmm fc1 [s+200, +1000), relu act [s+1300, +500), addmm EVIL [s+1850, +300 → pokes out of the
    graph call by 50 µs on step 0 only]; backward graph call [s+2500, s+3500), ops mm fc1 [s+2600, +200),
    threshold_backward act [s+2900, +100). Step region [s, s+4000), step starts every 5000 µs.
    """
    b = TraceBuilder(pid, rank=rank, inline=inline, positional=positional)
    b.meta("HH", {"name": b.host, "value": b.hhash})
    b.meta("thread_name", {"name": "MainThread", "value": "thread_name"})
    b.meta("process_name", {"name": f"python {file_name}" + (f" [rank {rank}]" if rank >= 0 else "")})
    b.meta("FH", {"name": f"/home/user/{file_name}", "value": "00000000000000f1"})
    b.event("start", "dftracer", T0, 0, ppid=1, rank=rank, world_size=1 if rank < 0 else 2, host=b.host)
    common = {"compile_id": "0/0", "graph": "__compiled_fn_1", "backend": "aot_eager", "file": file_name}
    b.oh("gf", kind="graph", phase="forward", n_ops=3, layer="", module_type="", **common)
    b.oh("gb", kind="graph", phase="backward", n_ops=2, layer="", module_type="", **common)
    b.oh("addmm", "gf", 0, kind="op", phase="forward", node="addmm", op_type="call_function", target="aten.addmm.default",
         layer="fc1", module_type="Linear", line=14, code="x = self.fc1(x)", **common)
    b.oh("relu", "gf", 1, kind="op", phase="forward", node="relu", op_type="call_function", target="aten.relu.default",
         layer="act", module_type="ReLU", line=15, code="x = self.act(x)", **common)
    b.oh("evil", "gf", 2, kind="op", phase="forward", node="addmm_1", op_type="call_function", target="aten.addmm.default",
         layer=EVIL, module_type="Evil</td>", line=16, code=f"x = self.fc2(x)  # {EVIL}", **common)
    b.oh("mm", "gb", 0, kind="op", phase="backward", node="mm", op_type="call_function", target="aten.mm.default",
         layer="fc1", module_type="Linear", line=14, code="x = self.fc1(x)", **common)
    b.oh("thr", "gb", 1, kind="op", phase="backward", node="threshold_backward", op_type="call_function",
         target="aten.threshold_backward.default", layer="act", module_type="ReLU", line=15, code="x = self.act(x)", **common)
    c = T0 + 1000
    frame = b.event("entire_frame_compile", "dynamo.compile", c, 50_000, compile_id="0/0")
    b.event("dynamo", "dynamo.compile", c + 100, 30_000, parent=frame, compile_id="0/0")
    b.event("backend_compile", "dynamo.compile", c + 31_000, 15_000, parent=frame, compile_id="0/0")
    epoch = b.event("epoch", "dynascope.region", T0 + 60_000, steps * 5000, epoch=0)
    for k in range(steps):
        s = T0 + 60_000 + k * 5000
        step = b.event("step", "dynascope.region", s, 4000, parent=epoch, epoch=0, step=k)
        gf = b.event("__compiled_fn_1.forward", "dynamo.graph", s + 100, 2000, parent=step, op="gf")
        b.event("function.addmm.default", "dynamo", s + 200, 1000, parent=gf, op="addmm")
        b.event("function.relu.default", "dynamo", s + 1300, 500, parent=gf, op="relu")
        b.event(f"{EVIL}.Linear_addmm", "dynamo", s + 1850, 300 if k == 0 else 200, parent=gf, op="evil")
        gb = b.event("__compiled_fn_1.backward", "dynamo.graph", s + 2500, 1000, parent=step, op="gb")
        b.event("function.mm.default", "dynamo", s + 2600, 200, parent=gb, op="mm")
        b.event("function.threshold_backward.default", "dynamo", s + 2900, 100, parent=gb, op="thr")
    b.event("end", "dftracer", T0 + 60_000 + steps * 5000 + 10, 0, num_events=b.n_events, dropped=0)
    # Children are written before parents in real traces (they finish first): reverse-sort by end time.
    meta = [line for line in b.lines if line["ph"] == "M"]
    events = [line for line in b.lines if line["ph"] == "X"]
    events.sort(key=lambda e: (e["ts"] + e["dur"], -e["dur"]))
    b.lines = meta + events
    return b


def make_explanation(script: str = "/home/user/train.py") -> dict:
    """An explanation.json as docs/explain-format.md describes it, with HTML in names and source."""
    guard = {
        "kind": "TENSOR_MATCH",
        "text": "x: Tensor, dtype float32, shape [8, 16], stride [16, 1], requires_grad=False, device cpu",
        "raw": "check_tensor(L['x'], Tensor, DispatchKeySet(CPU), torch.float32, size=[8, 16], stride=[16, 1])",
        "user_line": {"file": script, "line": 20, "code": f"y = model(x)  # {EVIL}"},
        "fail_count": 1,
    }
    brk = {
        "reason": "Data-dependent branching",
        "detail": "Dynamo cannot trace `if x.sum() > 0` <b>hint</b>: use torch.cond",
        "function": "forward",
        "file": script,
        "line": 17,
        "excerpt": "        if x.sum() > 0:",
        "count": 2,
        "compile_ids": ["0/0"],
    }
    recompile = {
        "function": "forward", "file": script, "line": 12, "compile_id": "0/1",
        "reason": "tensor 'x' size mismatch at index 0. expected 8, actual 4",
        "failures": [{"compile_id": "0/0", "reason": "tensor 'x' size mismatch at index 0. expected 8, actual 4",
                      "subject": "x", "expected": "8", "actual": "4"}],
    }
    resume_expl = {
        "function": {"name": "torch_dynamo_resume_in_forward_at_17", "qualname": "torch_dynamo_resume_in_forward_at_17",
                     "file": script, "line": 17},
        "source": None, "kind": "resume", "cache_entries": [], "graph_breaks": [], "recompiles": [],
        "compile_times": [], "notes": [],
    }
    expl = {
        "function": {"name": "forward", "qualname": f"Net{EVIL}.forward", "file": script, "line": 12},
        "source": f"def forward(self, x):\n    x = self.fc1(x)  # {EVIL}\n    return x",
        "kind": "function",
        "cache_entries": [
            {
                "index": 1, "compile_id": "0/0", "backend": "dynascope", "guard_count": 19,
                "guards": [
                    {"subject": "global state", "source": None,
                     "guards": [{"kind": "GLOBAL_STATE", "text": "global state (grad_mode=True) is unchanged",
                                 "raw": "___check_global_state()", "user_line": None, "fail_count": None}]},
                    {"subject": "x", "source": "L['x']", "guards": [guard]},
                ],
                "code": {"name": "forward", "source": f"def forward(self, x):\n    graph_out_0 = __compiled_fn_1(x)\n    return __resume_at_30_2(graph_out_0[0])  # {EVIL}", "decompiled": True},
                "subgraphs": [{"name": "__compiled_fn_1", "global_name": "__compiled_fn_1_abc",
                               "fx_code": "def forward(self, L_x_ : torch.Tensor):\n    l_x_ = L_x_\n    return (l_x_,)",
                               "op_count": 3, "node_count": 5}],
                "resume_functions": [{"name": "__resume_at_30_2", "code_name": "torch_dynamo_resume_in_forward_at_17",
                                      "offset": 30, "line": 17, "source": "    if x.sum() > 0:  <== resume in this line",
                                      "explanation": resume_expl}],
            }
        ],
        "graph_breaks": [brk], "recompiles": [recompile],
        "compile_times": [], "notes": [],
    }
    return {
        "schema": "dynascope.explanation/1",
        "torch_version": "2.13.0+cpu",
        "python_version": "3.11.7",
        "script": script,
        "explanations": [expl],
        "graph_breaks": [brk],
        "recompiles": [recompile],
        "compile_times": [
            {"compile_id": "0/0", "function": "forward", "file": script, "line": 12, "total_s": 0.05, "dynamo_s": 0.03,
             "aot_s": 0.004, "backend_s": 0.015, "inductor_s": None, "graph_op_count": 3, "guard_count": 19,
             "status": "ok", "fail_type": None, "fail_reason": None},
            {"compile_id": "0/1", "function": "forward", "file": script, "line": 12, "total_s": 0.02, "dynamo_s": 0.012,
             "aot_s": None, "backend_s": 0.006, "inductor_s": None, "graph_op_count": 3, "guard_count": 19,
             "status": "ok", "fail_type": None, "fail_reason": None},
        ],
        "cache_limit_hits": [],
        "eager_fallbacks": [],
        "notes": ["torch 2.13 gives no fail counts for shape guards"],
        "error": None,
        "future_key": {"ignored": True},
    }
