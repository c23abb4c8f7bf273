from __future__ import annotations

import re

import orjson
import polars as pl
import pytest
from render_fixtures import make_explanation, make_summary

from dynascope.analyze.summary import Summary
from dynascope.artifacts.run_dir import find_explanation, load_explanation
from dynascope.render.html import render_html, write_html


def test_escapes_every_user_string():
    html = render_html(make_summary(), make_explanation())
    # the only <script> element is ours, carrying the CSP nonce
    scripts = re.findall(r"<script\b[^>]*>", html)
    assert len(scripts) == 1 and 'nonce="' in scripts[0]
    assert "alert('x')</script>" not in html and "alert(&#39;x&#39;)&lt;/script&gt;" in html
    assert "Evil</td>" not in html and "Evil&lt;/td&gt;" in html  # module type in a table cell
    assert "<b>hint</b>" not in html and "&lt;b&gt;hint&lt;/b&gt;" in html  # graph break detail
    nonce = re.search(r"script-src 'nonce-([^']+)'", html).group(1)
    assert f'<script nonce="{nonce}">' in html


def test_self_contained_no_external_references():
    html = render_html(make_summary(), make_explanation())
    assert "default-src 'none'" in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "@import" not in html and "url(" not in html
    hrefs = re.findall(r'href="([^"]*)"', html)
    assert hrefs and all(h.startswith("#") for h in hrefs)


def test_tables_hold_the_summary_numbers():
    html = render_html(make_summary(), None)
    assert '<table class="sortable" data-table="by-op">' in html
    body = html.split('data-table="by-op"', 1)[1].split("</table>", 1)[0]
    row = next(r for r in body.split("<tr>") if "function.addmm.default" in r)
    cells = re.findall(r"<span>(.*?)</span>", row)
    assert cells == ["function.addmm.default", "dynamo", "4", "4 ms", "1 ms", "900 µs", "1.5 ms", "66.7%"]
    assert 'data-v="4000.0"' in row  # sortable on the raw value
    # run facts in the header cards
    cards = dict(re.findall(r'<div class="label">(.*?)</div><div class="value">(.*?)</div>', html))
    assert cards["events"] == "20" and cards["span"] == "70 ms" and cards["compile"] == "50 ms" and cards["run"] == "10 ms"
    assert cards["backward / forward"] == "0.07×"
    # charts: step bars, layer bars, splits
    assert html.count('class="wall"') == 2 and html.count('class="ops"') == 2
    assert 'id="chart-layers"' in html and 'id="chart-phase"' in html and 'id="chart-compile"' in html
    # forward 93.3% of op time in the split bar
    assert re.search(r'class="ph-forward" style="width: 93\.333%"', html)
    # no explanation: no explanation sections
    assert 'id="explanation"' not in html


def test_explanation_sections():
    html = render_html(make_summary(), make_explanation())
    for section in ("explanation", "graph-breaks", "recompiles", "compile-times", "functions"):
        assert f'id="{section}"' in html, section
    assert "Data-dependent branching" in html
    assert "tensor &#39;x&#39; size mismatch at index 0. expected 8, actual 4" in html
    assert "Decompiled code" in html and "__resume_at_30_2(graph_out_0[0])" in html
    assert "Resume function" in html and "torch_dynamo_resume_in_forward_at_17" in html
    assert "def forward(self, L_x_ : torch.Tensor):" in html  # subgraph FX code
    assert "TENSOR_MATCH" in html and "global state (grad_mode=True) is unchanged" in html
    assert "torch 2.13 gives no fail counts for shape guards" in html
    assert ">50 ms<" in html and ">70 ms<" in html  # compile time per id and total


def test_malformed_explanation_is_rendered_defensively(tmp_path):
    weird = {"explanations": [{"function": "not a dict", "cache_entries": [{"guards": "nope", "code": None}]}, 7],
             "graph_breaks": [{"reason": None, "count": "x"}, "junk"], "recompiles": None, "compile_times": [{"total_s": "slow"}]}
    html = render_html(make_summary(), weird)
    assert 'id="graph-breaks"' in html and "(unknown function)" in html
    bad = tmp_path / "explanation.json"
    bad.write_text("{ not json")
    data = load_explanation(bad)
    html = render_html(make_summary(), data)
    assert "could not read" in html
    bad.write_text("[1, 2]")
    assert "does not hold a JSON object" in render_html(make_summary(), load_explanation(bad))


def test_find_explanation_beside_trace(tmp_path):
    trace = tmp_path / "run" / "trace-1.pfw.gz"
    trace.parent.mkdir()
    trace.write_bytes(b"")
    assert find_explanation([trace]) is None
    (trace.parent / "explanation.json").write_bytes(orjson.dumps(make_explanation()))
    assert find_explanation([trace]) == trace.parent / "explanation.json"
    assert find_explanation([trace.parent]) == trace.parent / "explanation.json"


def test_empty_summary_and_many_rows(tmp_path):
    empty = Summary(*(pl.DataFrame() for _ in range(7)))
    html = render_html(empty)
    assert "No op events in these traces." in html and "data-table" not in html
    s = make_summary(top=5)
    n = 450
    s.by_op = pl.DataFrame({"name": [f"op{i}" for i in range(n)], "count": [1] * n, "total_us": [float(n - i) for i in range(n)]})
    html = write_html(s, tmp_path / "sub" / "r.html").read_text()
    assert "top 200 of 450" in html and "250 more rows" in html
    assert html.count("<tr><td") >= 200


def test_step_chart_cuts_outliers_and_labels_them():
    s = make_summary()
    n = 12
    totals = [1_000_000.0] + [1000.0] * (n - 2) + [250_000.0]
    s.by_step = pl.DataFrame({"epoch": [i // 6 for i in range(n)], "step": [i % 6 for i in range(n)],
                              "total_us": totals, "op_us": [500.0] * n, "op_count": [5] * n})
    html = render_html(s)
    chart = html.split('id="chart-steps"', 1)[1].split("</svg>", 1)[0]
    assert chart.count('class="wall"') == n
    # scale stops at 5× the typical (75th percentile) step: 5 ms; two bars are cut and labelled
    assert ">5 ms</text>" in chart
    assert re.findall(r'class="cutlabel"[^>]*>([^<]*)<', chart) == ["1 s", "250 ms"]
    assert ">0:0</text>" in chart and ">1:5</text>" in chart  # epoch:step labels with several epochs
    assert "2 steps cut at 5× the median step" in html


def test_process_chart_only_with_several_processes():
    s = make_summary()
    assert 'id="chart-processes"' not in render_html(s)
    s.by_process = pl.DataFrame({"pid": [10, 11], "host": ["n1", "n2"], "rank": [0, 1], "events": [5, 5],
                                 "op_us": [1000.0, 3000.0], "compile_us": [1000.0, 0.0]})
    html = render_html(s)
    chart = html.split('id="chart-processes"', 1)[1].split("</section>", 1)[0]
    assert "rank 0 · n1 · pid 10" in chart and "rank 1 · n2 · pid 11" in chart
    # rank 0: 1 ms op + 1 ms compile of a 3 ms peak → 33.333% each
    assert chart.count('style="width: 33.333%"') == 2 and 'style="width: 100.000%"' in chart


def _toy(a, b):
    import torch

    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


def test_html_renders_what_a_real_explain_run_holds(tmp_path):
    torch = pytest.importorskip("torch")
    from dynascope.explain import observe

    torch._dynamo.reset()
    try:
        with observe() as obs:
            compiled = torch.compile(_toy, backend="eager")
            compiled(torch.ones(4), torch.ones(4))
            compiled(torch.ones(4), -torch.ones(4))
        report = obs.report()
    finally:
        torch._dynamo.reset()
    path = tmp_path / "explanation.json"
    path.write_text(report.to_json())
    html = render_html(make_summary(), load_explanation(path))
    resumes = report.explanations[0].cache_entries[0].resume_functions
    assert sorted(rf.continues_at.code for rf in resumes) == ["b = b * -1", "return x * b"]
    for rf in resumes:  # which branch each resume function is: the line it continues with
        assert f'continues with line {rf.continues_at.line}: <span class="code">{rf.continues_at.code}</span>' in html
        assert f"Resume function <span class=\"mono\">{rf.name}</span>" in html
    assert html.count("This resume function") == 0 and html.count(">resume function</span>") == 2
    assert "_toy" in html and str(path) in html


def _compile_profile(script: str = "/home/user/train.py") -> dict:
    evil = "<script>alert('p')</script>"
    return {
        "schema": "dynascope.compile_profile/1", "torch_version": "2.13.0+cpu", "script": script,
        "compile_s": 1.5, "tracing_s": 0.25,
        "functions": [{"function": f"slow{evil}", "file": script, "line": 3, "inclusive_s": 0.2, "self_s": 0.19,
                       "traced": 1, "instructions": 800}],
        "lines": [{"function": "slow", "file": script, "line": 5, "code": f"x = x + i  # {evil}",
                   "inclusive_s": 0.18, "self_s": 0.18, "instructions": 600}],
        "frames": [{"compile_id": "0/0", "function": "model", "file": script, "line": 11, "total_s": 1.5,
                    "dynamo_s": 0.4, "tracing_s": 0.25, "guards_s": 0.05, "restart_s": 0.0, "aot_s": 0.3,
                    "backend_s": 0.8, "inductor_s": 0.7, "cache": {"fx_graph_misses": 1}, "status": "ok"}],
        "graph_breaks": [{"reason": "Failed to trace builtin operator", "function": "model", "file": script,
                          "line": 12, "code": "print(x)", "count": 1, "cost_s": 0.3, "compile_ids": ["0/0"]}],
        "recompiles": [{"function": "model", "file": script, "line": 13, "code": "y = y * scale",
                        "compile_id": "1/1", "reason": "guard failed: scale == 2", "cost_s": 0.2,
                        "line_from": "guard"}],
        "notes": [], "error": None,
    }


def test_compile_profile_section(tmp_path):
    html = render_html(make_summary(), None, compile_profile=_compile_profile())
    section = html.split('<section id="compile-profile">', 1)[1].split("</section>", 1)[0]
    assert 'href="#compile-profile"' in html
    assert "/home/user/train.py:3" in section and "/home/user/train.py:12" in section and "scale == 2" in section
    assert "alert('p')</script>" not in html and "slow&lt;script&gt;" in section
    assert "fx_graph_misses 1" in section
    assert 'id="compile-profile"' not in render_html(make_summary(), None)


def test_find_compile_profile_beside_trace(tmp_path):
    from dynascope.artifacts.run_dir import find_compile_profile

    trace = tmp_path / "t-1.pfw.gz"
    trace.write_bytes(b"")
    assert find_compile_profile([trace]) is None
    (tmp_path / "compile_profile.json").write_bytes(orjson.dumps(_compile_profile()))
    assert find_compile_profile([trace]) == tmp_path / "compile_profile.json"
    out = write_html(make_summary(), tmp_path / "r.html", compile_profile=find_compile_profile([trace]))
    assert "Compile profile" in out.read_text()
