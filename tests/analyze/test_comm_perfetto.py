"""`dynascope convert` links the same collective across ranks: one flow per (pg, seq), an instance on each
rank, in rank order."""

from __future__ import annotations

import json
import time
from collections import defaultdict

import pytest
from comm_synth import job

from dynascope.render.chrome import convert


def test_one_flow_per_collective_with_an_instance_per_rank(tmp_path):
    paths, s = job(tmp_path / "job", world=3, steps=3)
    stats = convert(paths, tmp_path / "trace.json")
    doc = json.loads((tmp_path / "trace.json").read_text())
    flows = defaultdict(list)
    for e in doc["traceEvents"]:
        if e.get("cat") == "comm" and e.get("ph") in ("s", "t", "f"):
            flows[e["id"]].append(e)
    assert stats.comm_flows == len(flows) == s.collectives.height == 3 * 4
    keys = {(e[0]["args"]["pg"], e[0]["args"]["seq"]) for e in flows.values()}
    assert keys == {(r["pg"], r["seq"]) for r in s.collectives.iter_rows(named=True)}
    assert doc["otherData"]["comm_flows"] == 12
    pid_rank = {10_000 + r: r for r in range(3)}
    for ident, events in flows.items():
        assert [e["ph"] for e in events] == ["s", "t", "f"], ident
        assert [pid_rank[e["pid"]] for e in events] == [0, 1, 2]
        assert isinstance(ident, int)  # Perfetto reads a string id as hex
        assert len({(e["args"]["pg"], e["args"]["seq"]) for e in events}) == 1 and events[0]["args"]["pg"] == "0"
        assert all(e["name"] == "all_reduce" for e in events)
        # each instance sits on its rank's complete event of that collective (the slice the flow binds to)
        for e in events:
            assert any(x.get("ph") == "X" and x["pid"] == e["pid"] and x["tid"] == e["tid"] and x["ts"] == e["ts"]
                       and x["name"] == "all_reduce" and x["dur"] > 0 for x in doc["traceEvents"])  # fmt: skip


@pytest.mark.slow
@pytest.mark.browser
def test_perfetto_binds_each_collective_across_ranks(tmp_path):
    """Perfetto's own trace processor (the UI vizviewer bundles, in headless Chromium) binds each collective's
    flow to its all_reduce slice on every rank: with 3 ranks, two links a collective (rank 0 -> 1 -> 2)."""
    from support.render_cdp import HeadlessChromium, find_chromium

    from dynascope.cli.view import find_viewer

    if find_chromium() is None or find_viewer() is None:
        pytest.skip("needs chromium on PATH and vizviewer (the `view` extra)")
    from test_perfetto_ui import _viewing

    paths, s = job(tmp_path / "job", world=3, steps=2)
    query = """(async () => {
      const engine = window.app && window.app.trace && window.app.trace.engine;
      if (!engine) return null;
      const r = await engine.query("select s1.name as a, s2.name as b, count(*) as n, "
        + "count(distinct s1.track_id) as ta, count(distinct s2.track_id) as tb from flow f "
        + "join slice s1 on f.slice_out = s1.id join slice s2 on f.slice_in = s2.id group by 1, 2");
      const out = [];
      for (const it = r.iter({a: 'str', b: 'str', n: 0, ta: 0, tb: 0}); it.valid(); it.next())
        out.push([it.a, it.b, Number(it.n), Number(it.ta), Number(it.tb)]);
      return out;
    })()"""
    with _viewing(paths, tmp_path) as url, HeadlessChromium(timeout=120, window=(1400, 900)) as browser:
        page = browser.open(url)
        flows = None
        end = time.monotonic() + 60
        while time.monotonic() < end and not flows:
            time.sleep(1)
            flows = page.evaluate(query)
        if flows is None:
            pytest.skip("this Perfetto UI does not expose its trace processor (window.app.trace.engine)")
    n = s.collectives.height
    # every link from an all_reduce slice to an all_reduce slice; rank 0's and rank 1's lanes out, 1's and 2's in
    assert [f[:3] for f in flows] == [["all_reduce", "all_reduce", 2 * n]], flows
    assert flows[0][3] == 2 and flows[0][4] == 2
