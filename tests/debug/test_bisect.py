"""Backend bisect on planted bugs: the stage, graph, op, layer and source line it names, and the
repro it writes (run in a fresh process: it fails while the bug is there and passes once it is gone)."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys

import planted
import pytest
import torch
from support import procs

import dynascope
from dynascope.cli import main as cli_main

HERE = os.path.dirname(os.path.abspath(__file__))


class Tail(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.act = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        y = self.fc2(self.act(self.fc1(x)))
        return torch.sigmoid(y) * 2 + 1


def line_of(fn, text: str) -> str:
    lines, first = inspect.getsourcelines(fn)
    return f"test_bisect.py:{first + next(i for i, line in enumerate(lines) if text in line)}"


def run_repro(directory: str, bug: bool, prelude: str = "") -> subprocess.CompletedProcess:
    """Run repro.py in a fresh process, with the planted bug live or not."""
    env = {**os.environ, "PYTHONPATH": HERE, "PLANTED_BUG": "1" if bug else "0"}
    code = f"{prelude}import runpy, sys; sys.argv = ['repro.py']; runpy.run_path({os.path.join(directory, 'repro.py')!r}, run_name='__main__')"
    return procs.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, check=False)


def check_repro(result, bug_prelude: str = "", fixed_prelude: str = "") -> None:
    assert result.repro and result.repro_size is not None and result.repro_size < result.graph_size
    failing = run_repro(result.repro, True, bug_prelude)
    assert failing.returncode == 1, failing.stdout + failing.stderr
    assert "FAIL" in failing.stdout
    fixed = run_repro(result.repro, False, fixed_prelude)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr


def test_a_backend_that_raises_on_one_op(tmp_path):
    torch.manual_seed(0)
    result = dynascope.bisect(Tail(), torch.randn(4, 8), backends=(planted.raise_on_sigmoid,), repro=str(tmp_path / "r"))
    # eager, aot_eager, aot_eager_decomp_partition and inductor agree; the planted backend raises
    assert [(s.stage, s.status) for s in result.stages] == [
        ("eager", "ok"), ("aot_eager", "ok"), ("aot_eager_decomp_partition", "ok"), ("inductor", "ok"),
        ("raise_on_sigmoid", "exception"),
    ]  # fmt: skip
    assert result.first_bad_stage == "raise_on_sigmoid" and result.kind == "exception" and result.exit_code == 1
    assert "NotImplementedError: planted: this backend cannot compile sigmoid" in result.error
    assert result.op is not None and result.op.target == "torch.sigmoid" and result.op.node == "sigmoid"
    assert result.op.source == line_of(Tail.forward, "torch.sigmoid")
    assert result.graph and result.graph.startswith("__compiled_fn_")
    check_repro(result)
    data = result.to_dict()
    assert data["first_bad_stage"] == "raise_on_sigmoid" and data["target"] == "torch.sigmoid"
    assert data["source"] == result.op.source and data["repro"] == result.repro


@pytest.mark.parametrize(
    ("backend", "error"),
    [(planted.perturb_relu, 1e-3), pytest.param(planted.perturb_relu_large, 1.0, marks=pytest.mark.slow)],
    ids=["small", "large"],
)
def test_a_backend_that_gets_one_op_slightly_or_badly_wrong(tmp_path, backend, error):
    torch.manual_seed(0)
    result = dynascope.bisect(Tail(), torch.randn(4, 8), backends=(backend,), repro=str(tmp_path / "r"))
    # a stage is named after the backend's importable name (planted.perturb_relu_large, ...)
    assert result.first_bad_stage == next(k for k, v in vars(planted).items() if v is backend)
    assert result.kind == "accuracy"
    op = result.op
    assert (op.target, op.node, op.layer, op.module_type) == ("torch.nn.functional.relu", "relu", "act", "ReLU")
    assert op.source == line_of(Tail.forward, "self.fc2(self.act")
    assert op.max_rel_err == pytest.approx(error, rel=0.05) and op.rtol == 1e-4  # the relu's own error
    check_repro(result)


class Swish(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.act = torch.nn.SiLU()

    def forward(self, x):
        return self.act(self.fc(x)).sum(dim=1)


@pytest.mark.slow
def test_a_wrong_decomposition_is_blamed_on_decompositions_not_aot_autograd(tmp_path):
    from torch._inductor.decomposition import decompositions

    saved = decompositions[torch.ops.aten.silu.default]
    planted.break_silu_decomposition()
    try:
        result = dynascope.bisect(Swish(), torch.randn(4, 8), repro=str(tmp_path / "r"))
    finally:
        planted.restore_silu_decomposition(saved)
    assert [s.status for s in result.stages] == ["ok", "ok", "accuracy"]
    assert result.first_bad_stage == "aot_eager_decomp_partition" and "decompositions" in result.stack_layer
    assert (result.op.target, result.op.layer, result.op.module_type) == ("torch.nn.functional.silu", "act", "SiLU")
    check_repro(result, bug_prelude="import planted; planted.break_silu_decomposition(); ")


class Dropped(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.fc(x)).relu()


def test_dropout_is_not_reported_as_diverging():
    torch.manual_seed(0)
    result = dynascope.bisect(Dropped(), torch.randn(8, 16))
    assert result.first_bad_stage is None and result.exit_code == 0
    assert [s.status for s in result.stages] == ["ok"] * 4


def test_cli_names_dynamo_and_the_line_it_cannot_trace(tmp_path):
    out = tmp_path / "result.json"
    script = os.path.join(HERE, "scripts", "untraceable.py")
    code = cli_main(["bisect", "--json", str(out), "--repro", str(tmp_path / "r"), "-q", script])
    assert code == 1
    data = json.loads(out.read_text())
    assert data["first_bad_stage"] == "eager" and data["kind"] == "exception"
    assert "Dynamo" in data["stack_layer"]
    assert data["error_source"] == "untraceable.py:13"  # the data-dependent branch


@pytest.mark.slow
def test_cli_bisects_the_backend_a_script_asks_for(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(HERE)
    out = tmp_path / "result.json"
    script = os.path.join(HERE, "scripts", "custom_backend.py")
    assert cli_main(["bisect", "--json", str(out), "--repro", str(tmp_path / "r"), "-q", script]) == 1
    data = json.loads(out.read_text())
    assert [s["stage"] for s in data["stages"]] == [
        "eager", "aot_eager", "aot_eager_decomp_partition", "inductor", "perturb_relu_large",
    ]  # fmt: skip
    assert data["first_bad_stage"] == "perturb_relu_large" and data["kind"] == "accuracy"
    assert (data["target"], data["layer"], data["source"]) == ("torch.nn.functional.relu", "act", "custom_backend.py:15")
    printed = capsys.readouterr().out
    assert "first bad stage: perturb_relu_large (accuracy)" in printed and "custom_backend.py:15" in printed


def test_usage_errors_exit_2(tmp_path, capsys):
    assert cli_main(["bisect", str(tmp_path / "missing.py")]) == 2
    assert "script not found" in capsys.readouterr().err
    script = tmp_path / "s.py"
    script.write_text("print('hi')\n")
    assert cli_main(["bisect", "--backend", "nosuchmodule:fn", str(script)]) == 2
    assert "cannot import nosuchmodule" in capsys.readouterr().err


@pytest.mark.slow
def test_an_inductor_bug_is_narrowed_to_its_subsystem(tmp_path):
    torch.manual_seed(0)
    saved = planted.break_relu_lowering()
    try:
        result = dynascope.bisect(Tail(), torch.randn(4, 8), repro=str(tmp_path / "r"))
    finally:
        planted.restore_relu_lowering(saved)
    assert [s.status for s in result.stages] == ["ok", "ok", "ok", "accuracy"]
    assert result.first_bad_stage == "inductor" and "code generation" in result.stack_layer
    assert (result.op.target, result.op.layer) == ("torch.nn.functional.relu", "act")
    if _torch_has_bisector():
        assert result.inductor_subsystem.startswith("lowerings")
    check_repro(result, bug_prelude="import planted; planted.break_relu_lowering(); ")


def _torch_has_bisector() -> bool:
    from dynascope import _torch

    return _torch.compiler_bisector() is not None


@pytest.mark.slow
def test_the_documented_example(tmp_path):
    """docs/debug.md's report: examples/bisect_example.py with examples/buggy_backend.py."""
    examples = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples")
    env = {**os.environ, "PYTHONPATH": examples}
    done = procs.run([sys.executable, "-m", "dynascope.cli", "bisect", "-q", "--json", "r.json",
                           os.path.join(examples, "bisect_example.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "op: torch.relu (node x) at bisect_example.py:17" in done.stdout
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["first_bad_stage"] == "buggy_backend" and data["max_rel_err"] == pytest.approx(0.1, rel=1e-3)
    repro = procs.run([sys.executable, "dynascope-repro/repro.py"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=300, check=False, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})  # fmt: skip
    assert repro.returncode == 1 and repro.stdout.startswith("FAIL")


@pytest.mark.slow
def test_the_demo_on_torch_2_13_finds_its_inductor_bug(tmp_path):
    """torch 2.13.0 on CPU gives zero gradients for the demo ConvNet's conv weights under inductor
    (its layout optimisation of static conv weights; torch 2.5.1 and 2.15 are right). On 2.13 bisect
    must find it and write a repro that fails; on other torches every stage must agree."""
    demo = os.path.join(os.path.dirname(os.path.dirname(HERE)), "src", "dynascope", "demo", "train.py")
    code = cli_main(["bisect", "-q", "--json", str(tmp_path / "r.json"), "--repro", str(tmp_path / "r"), demo])
    data = json.loads((tmp_path / "r.json").read_text())
    if not torch.__version__.startswith("2.13."):
        assert code == 0 and data["first_bad_stage"] is None
        return
    assert code == 1 and data["first_bad_stage"] == "inductor" and data["kind"] == "accuracy"
    assert data["where"] == "backward" and data["source"].startswith("train.py:")
    if _torch_has_bisector():
        assert data["inductor_subsystem"] == "inductor_layout_optimization"
    failing = run_repro(data["repro"], True)
    assert failing.returncode == 1 and "gradient" in failing.stdout


def test_stages_can_be_limited_to_skip_one_known_to_be_broken(capsys):
    torch.manual_seed(0)
    result = dynascope.bisect(Tail(), torch.randn(4, 8), stages=("eager",), backends=(planted.perturb_relu_large,))
    assert [s.stage for s in result.stages] == ["eager", "perturb_relu_large"]
    assert result.first_bad_stage == "perturb_relu_large"
    with pytest.raises(dynascope.DynascopeError, match="no built-in stage nope"):
        dynascope.bisect(Tail(), torch.randn(4, 8), stages=("nope",))


def test_the_compilations_of_the_inductor_narrowing_are_counted(tmp_path, monkeypatch):
    from dynascope.debug.bisect import search as bisect_module
    from dynascope.debug.bisect.stages import resolve

    def narrowing(tries):
        def narrow(gm, inputs, fails):
            for _ in range(tries):
                fails(gm, inputs, resolve("inductor"))

        return narrow

    counts = []
    for tries in (0, 3):
        monkeypatch.setattr(bisect_module, "inductor_subsystem", narrowing(tries))
        torch.manual_seed(0)
        saved = planted.break_relu_lowering()
        try:
            result = dynascope.bisect(Tail(), torch.randn(4, 8), repro=str(tmp_path / f"r{tries}"), progress=False)
        finally:
            planted.restore_relu_lowering(saved)
        assert result.first_bad_stage == "inductor"
        counts.append(result.compiles)
    assert counts[1] - counts[0] == 3
