"""Traced inductor compiles and AOTAutograd's cache (issue 25, defect 8): a warm run is served by the cache
and traces the same kernels, with the same attribution, as the cold run that filled it."""

import json
import os
import sys
import textwrap

import pytest
from support import procs
from support.tracecheck import attrs, check, load, op_events

from dynascope import _torch

NEEDS_HIT_PATH = pytest.mark.skipif(_torch.aot_cache_hits_unsupported() is not None,
                                    reason="AOTAutograd's cache hits are traced from torch 2.13")  # fmt: skip

SCRIPT = textwrap.dedent('''
    import json, sys
    import torch
    from torch._dynamo.utils import counters


    class Net(torch.nn.Module):
        """Three graphs (graph breaks between them); the first two are the same graph for two layers."""

        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(8, 8)
            self.b = torch.nn.Linear(8, 8)
            self.head = torch.nn.Linear(8, 2)

        def forward(self, x):
            y = torch.relu(self.a(x)) * 2
            torch._dynamo.graph_break()
            y = torch.relu(self.b(y)) * 2
            torch._dynamo.graph_break()
            return self.head(y)


    torch.manual_seed(0)
    net = torch.compile(Net())
    x = torch.randn(4, 8)
    for _ in range(2):
        net(x).sum().backward()
    with torch.no_grad():
        net(x)
    print("COUNTERS " + json.dumps(dict(counters["aot_autograd"])), file=sys.stderr)
''')


def run_traced(tmp_path, name, cache, explain=False):
    out = tmp_path / name
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "TORCHINDUCTOR_AUTOGRAD_CACHE": "1",
           "TORCHINDUCTOR_FX_GRAPH_CACHE": "1"}  # fmt: skip
    result = procs.run([sys.executable, "-m", "dynascope.cli", "run", "--out", str(out), "--no-html",
                             *([] if explain else ["--no-explain"]), str(tmp_path / "net.py")],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "untraced" not in result.stderr, result.stderr[-3000:]
    line = next(line for line in result.stderr.splitlines() if line.startswith("COUNTERS "))
    (trace,) = out.glob("*.pfw*")
    return json.loads(line.removeprefix("COUNTERS ")), check(load(str(trace)))


def kernel_rows(index):
    """Every kernel event in order: its name and what dynascope says it covers."""
    keys = ("phase", "compile_id", "kernel_kind", "layer", "module_type", "layers", "target", "node", "file",
            "line", "code", "lines")  # fmt: skip
    rows = []
    for event in op_events(index):
        fields = attrs(index, event)
        rows.append((event["name"], *(fields.get(key) for key in keys), index["sources"][fields["kernel_code"]]))
    return rows


@pytest.mark.slow
@NEEDS_HIT_PATH
def test_a_warm_run_is_served_by_aotautograds_cache_and_traces_the_same_kernels(tmp_path):
    (tmp_path / "net.py").write_text(SCRIPT)
    cache = tmp_path / "inductor-cache"
    cold_counters, cold = run_traced(tmp_path, "cold", cache, explain=True)
    warm_counters, warm = run_traced(tmp_path, "warm", cache, explain=True)

    # the cold run: b's graph is a's for another layer, so AOTAutograd's cache has it after a's compile;
    # dynascope takes no hit whose kernels it has no record of for this graph, so b compiles as a miss
    assert cold_counters.get("autograd_cache_saved", 0) >= 3 and not cold_counters.get("autograd_cache_hit")
    # the warm run: every graph (three for training, three without grad) from the cache
    assert warm_counters.get("autograd_cache_hit", 0) >= 6 and not warm_counters.get("autograd_cache_miss")
    cold_rows, warm_rows = kernel_rows(cold), kernel_rows(warm)
    assert len(cold_rows) > 20 and warm_rows == cold_rows  # the same kernel events, with the same attribution
    assert {row[1] for row in warm_rows} == {"forward", "backward", "inference"}
    layers = {}
    for row in warm_rows:
        layers.setdefault(row[2], set()).add(row[4])
    assert {"a", "b", "head"} <= set().union(*layers.values())
    assert all(len(found - {""}) == 1 for found in layers.values()), layers  # each graph its own layer only
    # what each graph saves for the backward: the warm run's graphs were not partitioned again, their memory
    # accounts come from beside the cache (capture/graph_memory.py), the same as the cold run's
    memory = [json.loads((tmp_path / run / "explanation.json").read_text())["memory"] for run in ("cold", "warm")]
    assert len(memory[0]) == 3 and memory[1] == memory[0]
    # inductor's own estimates too, the backward's included (compiled at its first call, after the forward's
    # record was written: the backward's record carries it)
    assert all(g["forward_peak"]["inductor_bytes"] and g["backward_peak"]["inductor_bytes"] for g in memory[1])


@NEEDS_HIT_PATH
def test_the_graph_behind_a_disabled_backward_is_the_one_instrumented():
    """A hit hands back the backward inside torch._dynamo.disable, whose wrapper copies the graph's fields
    (current_callable among them): replacing the copy would leave the backward untimed."""
    import dataclasses

    import torch

    @dataclasses.dataclass
    class Graph:
        current_callable: object

        def __call__(self, args):
            return self.current_callable(args)

    graph = Graph(lambda args: "inductor's")
    wrapped = torch._dynamo.disable(graph)
    assert hasattr(wrapped, "current_callable") and wrapped is not graph
    assert _torch._aot_output_code(wrapped) is graph
    assert _torch._aot_output_code(graph) is graph


def test_a_torch_whose_hit_path_is_unknown_compiles_traced_graphs_with_the_cache_off(monkeypatch, capsys):
    import torch._functorch.config as functorch_config

    from dynascope.capture import backend

    monkeypatch.setattr(_torch, "aot_cache_hits_unsupported", lambda: "torch 2.12.1 (reading hits needs 2.13)")
    monkeypatch.setattr(backend, "_noted", set())
    with functorch_config.patch(enable_autograd_cache=True):
        assert backend._aot_cache_context(lambda keys: True, lambda phase, graph: None) is None
        assert backend._aot_cache_context(lambda keys: True, lambda phase, graph: None) is None
        with _torch.without_autograd_cache():
            assert not _torch.aot_cache_enabled()
    err = capsys.readouterr().err
    assert err.count("AOTAutograd's cache is off for traced inductor compiles on torch 2.12.1") == 1
