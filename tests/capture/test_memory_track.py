"""Memory at run time on one real run (tests/capture/scripts/big_activation.py, which keeps ReLU's N x WIDE
float32 output for the backward, and runs out of memory at its last step): the sampler's counter track
(trace/memory.py) joined to graph calls and steps by `dynascope report`, against the bytes the graph saves
(worked out by hand); the end of the trace naming what ran when memory ran out; and, under
--compare-eager, what eager autograd saves against compiled."""

from __future__ import annotations

import json
import os
import re
import sys
import time

import pytest
from support import procs, tracecheck
from support.cli import dynascope_here

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "big_activation.py")
SAVED = 4096 * 8192 * 4  # 128 MiB


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("memory") / "out"
    done = procs.run([sys.executable, "-m", "dynascope.cli", "run", "--out", str(out), SCRIPT],
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert done.returncode == 1 and "MemoryError: planted" in done.stderr, done.stderr[-3000:]
    (trace,) = [str(p) for p in out.iterdir() if p.name.endswith(".pfw.gz")]
    report = json.loads(dynascope_here("report", str(out), "--json").stdout)
    return {"out": out, "trace": trace, "stdout": done.stdout, "report": report}


def test_the_trace_has_a_memory_track_that_sees_the_saved_activation(run):
    index = tracecheck.check(tracecheck.load(run["trace"]))
    samples = [(c["ts"], c["args"]["rss"]) for c in index["counters"] if c["name"] == "memory"]
    assert len(samples) >= 10 and [t for t, _ in samples] == sorted(t for t, _ in samples)
    graphs = [e for e in index["events"] if e["cat"] == "dynamo.graph"]
    first = min(e["ts"] for e in graphs)
    before = max(v for t, v in samples if t <= first)
    # the forward's N x WIDE output and the saved ReLU output are live together at some point
    assert max(v for _, v in samples) - before >= SAVED


def test_report_joins_samples_to_graphs_and_steps_and_says_what_was_saved(run):
    report = run["report"]
    rows = {r["phase"]: r for r in report["memory_by_graph"]}
    forward = rows["forward"]
    assert forward["saved_bytes"] == SAVED  # from the partition, exact
    assert forward["calls"] == 4  # the last one stopped inside
    # what each forward call left in use: the saved activation, measured (give or take the allocator)
    assert 0.75 * SAVED <= forward["grew_per_call"] <= 1.25 * SAVED, forward
    assert forward["estimated_peak"] >= 2 * SAVED  # the Linear's output and ReLU's, live together
    assert rows["backward"]["estimated_peak"] is not None
    steps = report["memory_by_step"]
    assert [s["step"] for s in steps][:3] == [0, 1, 2]
    assert all(s["peak_at"] for s in steps), steps
    layers = {r["layer"]: r["saved_bytes"] for r in report["memory_by_layer"]}
    assert layers == {"act": SAVED}


def test_perfetto_gets_the_samples_as_a_counter_track(run, tmp_path):
    out = tmp_path / "trace.json"
    assert dynascope_here("convert", run["trace"], "-o", str(out)).returncode == 0
    events = json.loads(out.read_text())["traceEvents"]
    counters = [e for e in events if e["ph"] == "C"]
    assert counters and all(e["name"] == "memory" and e["args"]["rss"] > 0 for e in counters)
    assert not [e for e in events if e["ph"] == "X" and e.get("name") == "memory"]  # not slices


def test_the_html_draws_each_steps_peak_over_the_step_chart_and_says_what_ran_out(run, tmp_path):
    page = tmp_path / "report.html"
    assert dynascope_here("report", str(run["out"]), "--html", str(page), "-q").returncode == 0
    html = page.read_text()
    points = re.search(r'<g class="memline"><polyline points="([^"]+)"', html)
    assert points and len(points.group(1).split()) == len(run["report"]["memory_by_step"])
    assert "peak memory" in html and "Out of memory: process" in html and "activation_memory_budget" in html


def test_the_terminal_report_shows_the_memory_tables(run):
    text = " ".join(dynascope_here("report", str(run["out"])).stdout.split())
    assert "Saved for the backward, per layer" in text and "Memory per step" in text
    assert "134 MB" in text  # 128 MiB, as the tables print bytes


@pytest.mark.gpu
def test_cuda_memory_is_the_caching_allocators_and_prefered_by_the_report(tmp_path):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    import dynascope

    model = torch.compile(torch.nn.Linear(1024, 8192).cuda(), backend=dynascope.backend())
    with dynascope.session(str(tmp_path / "run.pfw.gz")) as session:
        for i in range(30):  # the allocator's counters are read once per sampler batch (50 ms)
            with dynascope.region("step", step=i):
                model(torch.randn(4096, 1024, device="cuda")).relu().sum().backward()
                torch.cuda.synchronize()
                time.sleep(0.01)
    index = tracecheck.check(tracecheck.load(session.path))
    cuda = [c["args"] for c in index["counters"] if c["name"] == "cuda memory"]
    assert cuda and max(a["cuda_allocated"] for a in cuda) >= 4096 * 8192 * 4
    report = json.loads(dynascope_here("report", session.path, "--json").stdout)
    assert max(s["peak_max"] for s in report["memory_by_step"]) >= 4096 * 8192 * 4



def test_running_out_of_memory_leaves_a_trace_that_names_the_op_layer_and_line_and_the_knobs(run):
    index = tracecheck.check(tracecheck.load(run["trace"]))
    end = index["events"][-1]["args"]
    with open(SCRIPT, encoding="utf-8") as source:
        line = next(i for i, text in enumerate(source, 1) if "# the allocation that fails" in text)
    (running,) = end["running"]
    assert (end["exit_error"], end["oom"]) == ("MemoryError: planted: cannot allocate 64 GB", 1)
    assert end["rss_at_end"] > SAVED  # the step's saved activation is still held
    assert (running["graph"], running["phase"], running["op"]) == ("__compiled_fn_1", "forward",
                                                                   "function.allocate.default")
    assert (running["layer"], running["file"], running["line"]) == ("check", "big_activation.py", line)
    (row,) = run["report"]["out_of_memory"]
    assert (row["layer"], row["line"], row["op"]) == ("check", line, "function.allocate.default")
    said = " ".join(run["stdout"].split())
    assert f"Out of memory: process {row['pid']} stopped with MemoryError" in said
    assert f"layer check, big_activation.py:{line}" in said
    assert "activation_memory_budget" in said and "(134 MB saved at this batch)" in said
    # the run's summary line: the highest step peak, and what the graphs keep (the 128 MiB, in layer act)
    assert re.search(r"Memory: peak [\d.]+ [kMG]B in step \d \(.+\); the compiled graphs keep 134 MB a step for the "
                     r"backward \(most in act: 134 MB\)", said), said


GATED = os.path.join(os.path.dirname(__file__), "scripts", "gated.py")


def test_compare_eager_says_what_eager_saves_per_layer_and_why_compiled_saves_less(tmp_path):
    out = tmp_path / "out"
    done = procs.run([sys.executable, "-m", "dynascope.cli", "run", "--compare-eager", "--out", str(out), GATED],
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    row = 256 * 32 * 4  # one N x 32 float32 activation
    report = json.loads(dynascope_here("report", str(out), "--json").stdout)
    layers = {r["layer"]: r for r in report["memory_by_layer"]}
    # the eager run's step peaks beside the compiled run's (each run's memory track starts with its program)
    assert report["memory_by_step"] and all(r["eager_peak"] for r in report["memory_by_step"]), report["memory_by_step"]
    assert (layers["fc1"]["saved_bytes"], layers["fc1"]["eager_saved_bytes"]) == (row, row)
    # eager keeps sigmoid(h) and the product; inductor keeps the product and recomputes the sigmoid
    assert (layers["gate"]["saved_bytes"], layers["gate"]["eager_saved_bytes"]) == (row, 2 * row)
    assert layers["gate"]["recomputed"] == "sigmoid"
    said = " ".join(done.stdout.split())
    assert "compiled saves 65.5 kB a step, eager 98.3 kB in one forward (32.8 kB less)" in said
    assert "Peak memory against eager: compiled " in said
    assert "gate: compiled 32.8 kB, eager 65.5 kB: the partitioner recomputes sigmoid in the backward" in said
