"""The converted trace opened in a real Perfetto UI (the one vizviewer bundles), in headless Chromium.

Slow (the UI loads its WebAssembly trace processor) and needs both the `view` extra and chromium.
Asserts Perfetto parsed the file: its process and thread tracks appear and no parse error shows.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from render_fixtures import build_trace
from support.render_cdp import HeadlessChromium, find_chromium

from dynascope.cli.view import find_viewer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.browser,
    pytest.mark.skipif(find_chromium() is None, reason="chromium is not on PATH"),
    pytest.mark.skipif(find_viewer() is None, reason="no vizviewer (the `view` extra)"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _viewing(traces, tmp_path):
    """`dynascope view` serving the traces: yields its URL once it answers, and stops it afterwards."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dynascope.cli", "view", *map(str, traces), "-o", str(tmp_path / "t.json"),
         "--no-browser", "--port", str(port), "--timeout", "120"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).close()
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(proc.communicate()[0])
                time.sleep(0.3)
        yield f"http://127.0.0.1:{port}/"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
        proc.wait(timeout=20)


def test_perfetto_ui_loads_converted_trace(tmp_path):
    traces = [build_trace(pid=7000 + r, rank=r).write(tmp_path / f"train-{7000 + r}.pfw.gz") for r in range(2)]
    with _viewing(traces, tmp_path) as url, HeadlessChromium(timeout=120, window=(1400, 900)) as browser:
        page = browser.open(url)
        text = ""
        end = time.monotonic() + 60
        while time.monotonic() < end:
            text = (page.evaluate("document.body.innerText") or "").replace("\n", "")  # labels may wrap
            if "[rank 1]" in text:
                break
            time.sleep(1)
        page.screenshot(tmp_path / "perfetto.png", full_page=False)
        assert "python train.py [rank 0]" in text and "python train.py [rank 1]" in text, text[:2000]
        lowered = text.lower()
        assert "failed to parse" not in lowered and "oops" not in lowered


def test_perfetto_binds_the_batch_flows(tmp_path):
    """Each flow of the export (a worker's dataloader.fetch to the main process's dataloader.next) is bound
    by Perfetto's own trace processor to those two slices (asked through the UI's engine)."""
    from support import step_trace as st

    main, _ = st.training_trace(pid=4242, steps=4, slow_data=None, recompile=None, save_after=None)
    traces = [main.write(tmp_path / "train-4242.pfw.gz", gz=True)]
    for w in range(2):
        worker = st.worker_trace(5000 + w, 4242, w, list(range(w, 4, 2)), st.T0 - 500)
        traces.append(worker.write(tmp_path / f"train-{5000 + w}.pfw"))
    query = """(async () => {
      const app = window.app;
      const engine = app && app.trace && app.trace.engine;
      if (!engine) return null;
      const r = await engine.query("select s1.name as a, s2.name as b, count(*) as n from flow f "
        + "join slice s1 on f.slice_out = s1.id join slice s2 on f.slice_in = s2.id group by 1, 2");
      const out = [];
      for (const it = r.iter({a: 'str', b: 'str', n: 0}); it.valid(); it.next()) out.push([it.a, it.b, Number(it.n)]);
      return out;
    })()"""
    with _viewing(traces, tmp_path) as url, HeadlessChromium(timeout=120, window=(1400, 900)) as browser:
        page = browser.open(url)
        flows = None
        end = time.monotonic() + 60
        while time.monotonic() < end and not flows:
            time.sleep(1)
            flows = page.evaluate(query)
        if flows is None:
            pytest.skip("this Perfetto UI does not expose its trace processor (window.app.trace.engine)")
        assert flows == [["dataloader.fetch", "dataloader.next", 4]]
