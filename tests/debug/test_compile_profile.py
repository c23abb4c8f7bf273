"""Compile profile on real compiles: a planted slow-to-trace function comes out on top with its file
and line, graph breaks and recompiles are charged to their lines, pstats and JSON outputs open."""

from __future__ import annotations

import inspect
import json
import os
import pstats
import re

import profile_planted as planted
import pytest
import torch

import dynascope
from dynascope import _torch
from dynascope.cli import main as cli_main
from dynascope.debug.compile_profile import ProfileError

FILE = os.path.abspath(planted.__file__)


def _line(marker: str) -> int:
    lines = inspect.getsource(planted).splitlines()
    return next(i for i, text in enumerate(lines, 1) if marker in text)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def planted_profile(tmp_path):
    with dynascope.compile_profile() as prof:
        torch.compile(planted.model, backend="eager")(torch.randn(8))
    return prof


def test_planted_slow_function_on_top(planted_profile):
    result = planted_profile.result
    top = result.functions[0]
    assert (top.function, top.file, top.line) == ("slow_to_trace", FILE, planted.slow_to_trace.__code__.co_firstlineno)
    assert top.self_s > 0.5 * result.tracing_s
    assert top.instructions > 150 * 4
    assert result.lines[0].line == _line("SLOW LINE") and result.lines[0].file == FILE
    assert result.lines[0].code.startswith("x = x + i")
    caller = next(f for f in result.functions if f.function == "model")
    assert caller.inclusive_s >= top.inclusive_s > 0 and caller.self_s < caller.inclusive_s
    call_line = next(ln for ln in result.lines if ln.line == _line("y = slow_to_trace(y)"))
    assert call_line.inclusive_s >= top.inclusive_s * 0.99 and call_line.self_s < call_line.inclusive_s
    # torch internals Dynamo inlined (gelu's handling, Tensor.relu) are folded into user lines
    torch_dir = _torch.torch_package_dir()
    assert all(not f.file.startswith(torch_dir) for f in result.functions)
    assert {f.function for f in result.functions} == {"slow_to_trace", "model", "quick"}
    frame = result.frames[0]
    assert frame.function == "model" and frame.total_s and frame.dynamo_s
    assert result.compile_s >= result.tracing_s > 0


def test_json_and_pstats(planted_profile, tmp_path):
    data = json.loads(json.dumps(planted_profile.to_dict()))
    assert data["schema"] == "dynascope.compile_profile/1"
    first = data["functions"][0]
    assert {"function", "file", "line", "inclusive_s", "self_s"} <= set(first) and first["function"] == "slow_to_trace"
    path = planted_profile.write_pstats(tmp_path / "compile.prof")
    stats = pstats.Stats(path)
    stats.sort_stats("tottime")
    ranked = stats.fcn_list  # type: ignore[attr-defined]
    assert ranked[0] == (FILE, planted.slow_to_trace.__code__.co_firstlineno, "slow_to_trace")
    callers = stats.stats[ranked[0]][4]  # type: ignore[attr-defined]
    assert (FILE, planted.model.__code__.co_firstlineno, "model") in callers


def test_graph_break_and_recompile_charged_to_their_lines():
    net = torch.compile(planted.Breaks(), backend="eager")
    with dynascope.compile_profile() as prof:
        net(torch.randn(2, 4), 2)
        net(torch.randn(2, 4), 3)
    result = prof.result
    (gb,) = result.graph_breaks
    assert (gb.file, gb.line) == (FILE, _line("BREAK LINE")) and gb.cost_s > 0
    (rc,) = result.recompiles
    assert (rc.file, rc.line) == (FILE, _line("SCALE LINE"))
    assert rc.line_from == ("guard" if _torch.torch_at_least(2, 13) else "first use")
    assert "scale" in rc.reason and rc.cost_s > 0 and rc.function == "forward"
    # the resume function after the break counts as forward, the function it continues
    assert [f.function for f in result.functions] == ["Breaks.forward"]
    assert {f.compile_id for f in result.frames} >= {"0/0", "1/0", "1/1"}


def test_one_profile_at_a_time():
    with dynascope.compile_profile(), pytest.raises(ProfileError), dynascope.compile_profile():
        pass


def test_hook_removed_afterwards():
    from torch._dynamo.symbolic_convert import InstructionTranslatorBase

    before = InstructionTranslatorBase.step
    with dynascope.compile_profile():
        assert InstructionTranslatorBase.step is not before
    assert InstructionTranslatorBase.step is before


@pytest.mark.skipif(not _torch.has_dynamo_profiler(), reason="torch's Dynamo profiler needs torch >= 2.13")
def test_agrees_with_torchs_dynamo_profiler(capsys):
    """torch's TORCH_COMPILE_DYNAMO_PROFILER, on in the same compile, ranks the same function first."""
    with torch._dynamo.config.patch(dynamo_profiler=True), dynascope.compile_profile() as prof:
        torch.compile(planted.model, backend="eager")(torch.randn(8))
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if "planted.py:" in ln and "ms" in ln]
    theirs = max(rows, key=lambda ln: float(ln.split()[2].rstrip("ms")))  # by tottime
    assert "slow_to_trace" in theirs and prof.result.functions[0].function == "slow_to_trace"


def test_cli(tmp_path, capsys):
    out, prof_file = tmp_path / "p.json", tmp_path / "p.prof"
    status = cli_main(["compile-profile", "--json", str(out), "--pstats", str(prof_file), planted.__file__])
    assert status == 0
    text = capsys.readouterr().out
    assert "user functions, by Dynamo tracing time" in text
    table = text.split("user functions", 1)[1].splitlines()
    rule = next(i for i, ln in enumerate(table) if ln.strip().startswith("───"))
    assert table[rule - 1].split()[:3] == ["function", "self", "incl"]
    assert table[rule + 1].split()[0] == "slow_to_trace" and re.fullmatch(r"\d+(\.\d+)? (µs|ms|s)",
                                                                          table[rule + 1].split("  ")[2].strip())
    data = json.loads(out.read_text())
    assert data["functions"][0]["function"] == "slow_to_trace" and data["functions"][0]["file"] == FILE
    assert pstats.Stats(str(prof_file)).total_tt > 0  # type: ignore[attr-defined]


def test_cli_tables_fit_a_narrow_terminal(capsys, monkeypatch):
    """At 60 columns the tables leave columns out (and say which), never a time's unit."""
    monkeypatch.setenv("COLUMNS", "60")
    assert cli_main(["compile-profile", planted.__file__]) == 0
    lines = capsys.readouterr().out.splitlines()
    rules = [i for i, ln in enumerate(lines) if ln.strip().startswith("───")]
    assert len(rules) == 2  # user functions, user lines
    for i in rules:
        assert lines[i - 1].split()[:3] in (["function", "self", "incl"], ["line", "self", "incl"])
        rows = [ln for ln in lines[i + 1 : i + 4] if ln.strip()]
        assert rows and all(len(ln) <= 60 for ln in lines[i - 3 : i + 1 + len(rows)])
        for row in rows:
            self_s, incl_s = re.split(r"\s{3,}", row.strip())[1:3]
            assert re.fullmatch(r"\d+(\.\d+)? (µs|ms|s)", self_s) and re.fullmatch(r"\d+(\.\d+)? (µs|ms|s)", incl_s)
    assert any("not shown at this width" in ln for ln in lines)


def test_run_writes_the_profile_beside_the_trace_and_into_the_report(tmp_path):
    status = cli_main(["run", "--out", str(tmp_path / "out"), "--backend", "eager", "--compile-profile",
                       planted.__file__])  # fmt: skip
    assert status == 0
    data = json.loads((tmp_path / "out" / "compile_profile.json").read_text())
    assert data["functions"][0]["function"] == "slow_to_trace"
    html = (tmp_path / "out" / "report.html").read_text()
    assert 'id="compile-profile"' in html and "slow_to_trace" in html.split('id="compile-profile"', 1)[1]
