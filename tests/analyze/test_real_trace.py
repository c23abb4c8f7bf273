"""One real trace from the writer: torch.compile with dynascope's backend, three steps."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from test_summarize import assert_same  # noqa: E402

import dynascope  # noqa: E402
from dynascope.analyze.pipeline import summarize, summarize_files  # noqa: E402
from dynascope.analyze.read.reader import read_trace  # noqa: E402


class _MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 16)
        self.act = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def test_real_trace_reads_and_summarises(tmp_path):
    torch._dynamo.reset()
    model = _MLP()
    with dynascope.session(str(tmp_path / "trace")):
        fn = torch.compile(model, backend=dynascope.backend())
        for step in range(3):
            with dynascope.region("step", epoch=0, step=step):
                fn(torch.randn(8, 16)).sum().backward()
    files = sorted(tmp_path.glob("trace-*.pfw*"))
    assert len(files) == 1
    frame = read_trace(files)
    ops = frame.filter(frame["cat"] == "dynamo")
    assert ops.height > 0 and ops["layer"].null_count() == 0 and ops["phase"].null_count() == 0
    s = summarize(frame)
    layers = set(s.by_layer["layer"].to_list())
    assert {"fc1", "fc2", "act"} <= layers
    assert set(s.by_phase["phase"].to_list()) == {"forward", "backward"}
    assert s.by_op["count"].sum() == ops.height == s.meta["ops"]
    # every step holds one forward and one backward call's ops, the same number each step
    assert s.by_step["step"].to_list() == [0, 1, 2]
    counts = s.by_step["op_count"].to_list()
    assert counts[0] == counts[1] == counts[2] > 0 and sum(counts) == ops.height
    graph = s.by_graph.filter(s.by_graph["phase"] == "forward").row(0, named=True)
    assert graph["calls"] == 3 and graph["compile_id"] == "0/0"
    cvr = dict(zip(s.compile_vs_run["kind"].to_list(), s.compile_vs_run["total_us"].to_list(), strict=True))
    assert cvr["compile"] > 0 and cvr["run"] > 0
    assert s.by_process["rank"].to_list() == [-1] and s.meta["dropped_lines"] == 0
    assert_same(summarize_files(files), s)
