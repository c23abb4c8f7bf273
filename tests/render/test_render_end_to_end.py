"""A real traced torch.compile run, end to end through every renderer (slow: compiles a model twice).

script → trace (dynascope.session + dynascope.backend + regions) and explanation (`dynascope explain`)
→ `dynascope report --html/--json` → `dynascope convert` → headless Chromium.
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from support import procs
from support.render_cdp import HeadlessChromium, find_chromium

from dynascope.cli import main as cli_main

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent(
    '''
    import os, sys, torch, dynascope

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(16, 32)
            self.act = torch.nn.ReLU()
            self.fc2 = torch.nn.Linear(32, 4)
        def forward(self, x):
            return self.fc2(self.act(self.fc1(x)))

    def main(backend):
        torch.manual_seed(0)
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        cmodel = torch.compile(model, backend=backend)
        for step in range(4):
            with dynascope.region("step", epoch=0, step=step):
                loss = cmodel(torch.randn(8, 16)).sum()
                loss.backward(); opt.step(); opt.zero_grad()

    if __name__ == "__main__":
        if len(sys.argv) > 1:
            with dynascope.session(sys.argv[1]):
                main(dynascope.backend(name="e2e"))
        else:
            main("aot_eager")
    '''
)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("e2e")
    script = d / "train.py"
    script.write_text(SCRIPT)
    traced = procs.run([sys.executable, str(script), str(d / "train.pfw.gz")], capture_output=True, check=False, text=True, timeout=300)
    assert traced.returncode == 0, traced.stderr[-3000:]
    explained = procs.run(
        [sys.executable, "-m", "dynascope.cli", "explain", "--quiet", "--out", str(d), str(script)],
        capture_output=True, check=False, text=True, timeout=300,
    )
    assert explained.returncode == 0, explained.stderr[-3000:]
    assert (d / "explanation.json").is_file()
    return d


def test_report_convert_and_browser(run_dir, capsys):
    traces = sorted(run_dir.glob("train-*.pfw.gz"))
    assert len(traces) == 1
    html = run_dir / "report.html"
    assert cli_main(["report", str(run_dir), "--json", "--html", str(html)]) == 0
    doc = json.loads(capsys.readouterr().out)
    layers = {r["layer"]: r for r in doc["by_layer"]}
    assert {"fc1", "act", "fc2"} <= set(layers)
    assert layers["fc1"]["forward_us"] > 0 and layers["fc1"]["backward_us"] > 0
    phases = {r["phase"] for r in doc["by_phase"]}
    assert {"forward", "backward"} <= phases
    assert [r["step"] for r in doc["by_step"] if r["step"] is not None] == [0, 1, 2, 3]

    out = run_dir / "trace.chrome.json"
    assert cli_main(["convert", str(traces[0]), "-o", str(out), "-q"]) == 0
    chrome = json.loads(out.read_text())
    xs = [e for e in chrome["traceEvents"] if e["ph"] == "X"]
    ops = [e for e in xs if e["cat"].startswith("dynamo,")]
    assert ops and all(e["args"].get("layer") is not None for e in ops)
    assert any(e["cat"] == "dynamo,backward" for e in ops) and any(e["cat"] == "dynamo.compile" for e in xs)

    text = html.read_text()
    assert 'id="functions"' in text and "Net.forward" in text  # the explanation beside the trace
    if find_chromium() is None:
        pytest.skip("chromium is not on PATH")
    with HeadlessChromium(timeout=120) as browser:
        page = browser.open(html.resolve().as_uri())
        assert page.console_errors == []
        assert page.requests == [html.resolve().as_uri()]
        assert page.evaluate("document.querySelectorAll('#by-layer tbody tr').length") == 3
        page.screenshot(run_dir / "report.png")
