"""`dynascope convert` links the same collective across ranks: one flow per (pg, seq), an instance on each
rank, in rank order."""

from __future__ import annotations

import json
from collections import defaultdict

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
    assert doc["otherData"]["comm_flows"] == 12
    pid_rank = {10_000 + r: r for r in range(3)}
    for ident, events in flows.items():
        assert [e["ph"] for e in events] == ["s", "t", "f"], ident
        assert [pid_rank[e["pid"]] for e in events] == [0, 1, 2]
        pg, seq = ident.split(":")[1:]
        assert all(e["args"] == {"pg": pg, "seq": int(seq)} and e["name"] == "all_reduce" for e in events)
        # each instance sits on its rank's complete event of that collective (the slice the flow binds to)
        for e in events:
            assert any(x.get("ph") == "X" and x["pid"] == e["pid"] and x["tid"] == e["tid"] and x["ts"] == e["ts"]
                       and x["name"] == "all_reduce" and x["dur"] > 0 for x in doc["traceEvents"])  # fmt: skip
