"""`dynascope run` and `dynascope demo` on real scripts, in subprocesses, as a user runs them."""

import json
import os
import sys

from support import procs
from support.invariants import assert_invariants
from support.tracecheck import attrs, check, load, op_events, trace_files

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts_train.py")


def dynascope(*args, cwd):
    return procs.run([sys.executable, "-m", "dynascope.cli", *args], cwd=cwd, capture_output=True, check=False, text=True, timeout=600)


def test_run_traces_explains_and_reports_an_unmodified_script(tmp_path):
    result = dynascope("run", "--out", "out", SCRIPT, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "trained" in result.stdout and "Top" in result.stdout
    assert "aot_eager" not in result.stderr  # the script asked for inductor: its kernels are what is traced
    out = tmp_path / "out"
    [trace] = trace_files(str(out))
    index = check(load(trace))
    kernels = op_events(index)
    assert {attrs(index, e)["phase"] for e in kernels} == {"forward", "backward"}
    assert {attrs(index, e)["kernel_kind"] for e in kernels} >= {"generated", "extern"}
    assert len(op_events(index, "dynamo.graph")) == 6  # 3 forward + 3 backward calls
    explanation = json.loads((out / "explanation.json").read_text())
    assert "forward" in json.dumps(explanation)
    html = (out / "report.html").read_text()
    assert "extern_kernels.addmm" in html and "<script src=" not in html
    assert str(out / "report.html") in result.stdout
    assert_invariants(out, result.stdout)


def test_run_with_aot_eager_traces_aten_ops(tmp_path):
    result = dynascope("run", "--out", "out", "--backend", "aot_eager", "--no-html", SCRIPT, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    index = check(load(trace_files(str(tmp_path / "out"))[0]))
    assert "function.addmm.default" in {e["name"] for e in op_events(index)}
    assert_invariants(tmp_path / "out", result.stdout)


def test_run_with_eager_traces_the_dynamo_graph(tmp_path):
    result = dynascope("run", "--out", "out", "--backend", "eager", "--no-html", SCRIPT, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    index = check(load(trace_files(str(tmp_path / "out"))[0]))
    assert {e["name"] for e in op_events(index)} == {"function.linear", "function.relu"}
    assert not (tmp_path / "out" / "report.html").exists()
    assert_invariants(tmp_path / "out", result.stdout)


def test_a_failing_script_keeps_its_error_and_our_outputs(tmp_path):
    # aot_eager: what is tested is the error and the outputs, not inductor (test_run_traces_explains... has it)
    result = dynascope("run", "--out", "out", "--backend", "aot_eager", SCRIPT, "--fail", cwd=tmp_path)
    assert result.returncode == 1
    assert "ValueError: bad batch" in result.stderr and "scripts_train.py" in result.stderr
    assert (tmp_path / "out" / "report.html").exists()
    check(load(trace_files(str(tmp_path / "out"))[0]))
    (tmp_path / "exit3.py").write_text("import sys\nprint('bye')\nsys.exit(3)\n")  # the exit status alone
    result = dynascope("run", "--out", "out3", "--no-explain", "exit3.py", cwd=tmp_path)
    assert result.returncode == 3 and "bye" in result.stdout


def test_missing_script_is_one_line(tmp_path):
    result = dynascope("run", "nowhere.py", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "script not found" in result.stderr


def test_demo(tmp_path):
    result = dynascope("demo", "--out", "demo", "--epochs", "1", "--steps", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Top 8 inductor kernels by total time" in result.stdout  # the demo compiles with inductor
    index = check(load(trace_files(str(tmp_path / "demo"))[0]))
    kernels = {e["name"] for e in index["events"] if e["cat"] == "dynamo"}
    assert "extern_kernels.convolution" in kernels  # which kernels make the top 8 depends on the machine
    names = [e["name"] for e in index["events"]]  # a plain loop: its steps come from its own calls
    assert names.count("optimizer.step") == names.count("backward") == 2
    assert names.count("torch.save") == 1 and names.count("dataloader.next") == 3
    assert_invariants(tmp_path / "demo", result.stdout)


INTERRUPTED_SCRIPT = '''
import os, signal, time
import torch

def double_relu(x):
    return torch.relu(x) * 2

compiled = torch.compile(double_relu, backend="aot_eager")
for _ in range(2):
    compiled(torch.randn(4))
os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C
time.sleep(30)
print("not reached")
'''


def test_ctrl_c_gives_130_and_readable_outputs_in_run_and_explain(tmp_path):
    from dynascope.artifacts.explanation import Report

    script = tmp_path / "interrupted.py"
    script.write_text(INTERRUPTED_SCRIPT)
    ran = dynascope("run", "--out", "run", "--no-html", str(script), cwd=tmp_path)
    explained = dynascope("explain", "--out", "explain", str(script), cwd=tmp_path)
    for result, command in ((ran, "run"), (explained, "explain")):
        assert result.returncode == 130, result.stderr[-3000:]
        assert f"dynascope {command}: interrupted; the outputs above cover the run until then" in result.stderr
        assert "not reached" not in result.stdout and "Traceback" not in result.stderr
        report = Report.from_json((tmp_path / command / "explanation.json").read_text())
        assert report.error == "KeyboardInterrupt: " and report.explanations[0].function.name == "double_relu"
    index = check(load(trace_files(str(tmp_path / "run"))[0]))
    assert {e["name"] for e in op_events(index)} >= {"function.relu.default"}
