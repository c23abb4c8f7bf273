"""`dynascope explain` end to end (subprocess) and the shared run_script helper."""

import ast
import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
from support import procs

from dynascope.artifacts.explanation import Report
from dynascope.scriptrun import ScriptError, run_script

ROOT = Path(__file__).resolve().parents[2]
DYNASCOPE = [sys.executable, "-m", "dynascope.cli"]


def run_cli(*args, cwd=ROOT):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return procs.run([*DYNASCOPE, "explain", *args], cwd=cwd, capture_output=True, check=False, text=True, env=env,
                          timeout=300)


def test_explain_toy_example_script_with_out(tmp_path):
    out = tmp_path / "out"
    proc = run_cli("--out", str(out), "examples/toy_example.py")
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "This function is optimized by Dynamo. It has 1 cache entry." in text
    assert text.count("<== resume in this line") == 2
    assert "Data-dependent branching" in text and "toy_example.py:13" in text
    assert "Compile times (3 compiles" in text
    assert sorted(p.name for p in out.iterdir()) == ["explanation.json", "toy_example.py"]
    report = Report.from_json((out / "explanation.json").read_text())
    assert report.schema == "dynascope.explanation/1"
    assert report.script.endswith("examples/toy_example.py") and report.error is None
    (expl,) = report.explanations
    assert expl.function.name == "toy_example"
    assert [e.compile_id for e in expl.all_entries()] == ["0/0", *sorted(
        e.compile_id for e in expl.all_entries()[1:])] or len(expl.all_entries()) == 3
    assert len(expl.all_entries()) == 3
    assert sorted(ct.compile_id for ct in report.compile_times) == ["0/0", "1/0", "2/0"]
    assert [gb.reason for gb in report.graph_breaks] == ["Data-dependent branching"]
    py = (out / "toy_example.py").read_text()
    ast.parse(py)  # readable, commented Python
    assert "class __compiled_fn_1(torch.nn.Module):" in py
    assert "#     if b.sum() < 0:  <== resume in this line" in py
    assert "#   a: Tensor, dtype float32, shape [10]" in py


def test_script_that_raises_reports_then_exits_with_its_error(tmp_path):
    script = tmp_path / "boom.py"
    script.write_text(textwrap.dedent('''
        import sys
        import torch

        def double(x):
            return x * 2

        f = torch.compile(double, backend="eager")
        f(torch.ones(3))
        print("args:", sys.argv[1:])

        def fail():
            raise ValueError("bad input " + sys.argv[1])

        fail()
    '''))
    out = tmp_path / "out"
    proc = run_cli("--out", str(out), str(script), "first")
    assert proc.returncode == 1
    assert "args: ['first']" in proc.stdout
    assert "This function is optimized by Dynamo. It has 1 cache entry." in proc.stdout
    err = proc.stderr
    assert "ValueError: bad input first" in err
    assert f'File "{script}", line 13, in fail' in err
    assert "dynascope/cli.py" not in err and "scriptrun.py" not in err and "runpy" not in err
    report = json.loads((out / "explanation.json").read_text())
    assert report["error"] == "ValueError: bad input first"
    assert [e["function"]["name"] for e in report["explanations"]] == ["double"]


def test_missing_script_is_one_line_error(tmp_path):
    proc = run_cli(str(tmp_path / "nope.py"))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "script not found" in lines[0] and lines[0].startswith("dynascope explain: error:")


def test_script_exit_code_is_passed_through(tmp_path, capsys):
    from dynascope.cli.explain import main

    script = tmp_path / "exit3.py"
    script.write_text("import sys\nsys.exit(3)\n")
    assert main([str(script)]) == 3
    assert "No function was compiled" in capsys.readouterr().out


def test_run_script_sets_argv_path_and_restores(tmp_path):
    script = tmp_path / "s.py"
    (tmp_path / "sibling.py").write_text("VALUE = 41\n")
    script.write_text(
        "import sys, sibling\n"
        "assert __name__ == '__main__'\n"
        "sys.modules['__main__'].RESULT = (sys.argv[:], sibling.VALUE + 1)\n"
        "if sys.argv[1] == 'exit0':\n    raise SystemExit(0)\n"
        "if sys.argv[1] == 'fail':\n    raise KeyError('k')\n"
    )
    argv, path = sys.argv[:], sys.path[:]
    assert run_script(str(script), ["ok"]) is None
    assert run_script(str(script), ["exit0"]) is None
    err = run_script(str(script), ["fail"])
    assert isinstance(err, KeyError) and err.__traceback__ is not None
    assert sys.argv == argv and sys.path == path
    with pytest.raises(ScriptError, match="script not found"):
        run_script(str(tmp_path / "missing.py"), [])
    with pytest.raises(ScriptError, match=r"directory without __main__\.py"):
        run_script(str(tmp_path), [])
