"""Terminal tables at any width and when piped (issue 25, defect 3): a real `dynascope run` of a small
training loop, its tables printed by `dynascope report`, `dynascope run`, `dynascope explain` and
`dynascope diff` at 60, 80, 100 and 120 columns and piped.

Every table line fits the width; every cell of a time, size, share or count column is whole (a number and
its unit, never cut, no "…"); the columns a narrow width leaves out are the first of the table's
documented drop order (TableSpec.drop in render/_fmt.py) and the title names them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from render_fixtures import build_trace
from support import procs
from support.invariants import assert_invariants

from dynascope.cli import main as cli_main
from dynascope.render import _fmt
from dynascope.render.table_specs import SPEC_BY_ATTR, STEP_PARTS, TableSpec

WIDTHS = (60, 80, 100, 120)

SCRIPT = textwrap.dedent(
    '''
    import os
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    class Classifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.feature_extractor_block = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU())
            self.classification_head_layer = torch.nn.Linear(32, 4)

        def forward(self, x):
            return self.classification_head_layer(self.feature_extractor_block(x))

    torch.manual_seed(0)
    model = Classifier()
    compiled = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    # 40 samples in batches of 12: the last batch of each epoch is smaller (one recompile)
    loader = DataLoader(TensorDataset(torch.randn(40, 16), torch.randint(0, 4, (40,))), batch_size=12)
    for epoch in range(2):
        for x, y in loader:
            torch.nn.functional.cross_entropy(compiled(x), y).backward()
            opt.step()
            opt.zero_grad()
        torch.save(model.state_dict(), os.path.join(os.getcwd(), f"checkpoint-epoch-{epoch}.pt"))
    print("trained")
    '''
)

# what a whole cell of each kind of column looks like (fmt_us, fmt_share, fmt_bytes, ...); "–" is "none"
CELL = {
    "us": r"[-+]?\d+(\.\d+)? (µs|ms|s)|\d+ min \d+ s",
    "share": r"<0\.1%|\d+(\.\d)?%",
    "bytes": r"\d+(\.\d+)? (B|kB|MB|GB|TB)",
    "int": r"-?\d{1,3}(,\d{3})*",
    "float": r"-?[\d,]+(\.\d)?",
    "ratio": r"\d+\.\d\d×|new",
    "id": r"[^\s…]+",
}
NONE = ("–", "=")  # no value; no change (diff)

# a table's title as printed -> its spec (the end-of-run summary's "Top N ..." is by_op or by_kernel)
TITLES = (
    ("Top ", None),
    ("Steps: where each step's time goes", "by_step"),
    ("Files: where the program's file I/O goes", "by_file"),
    *((spec.title, spec.attr) for spec in sorted(SPEC_BY_ATTR.values(), key=lambda s: -len(s.title))),
)
DIFF_KINDS = {"count A": "int", "count B": "int", "A": "us", "B": "us", "Δ": "us", "B/A": "ratio"}


def _run(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}  # piped, no COLUMNS: the default width
    return procs.run([sys.executable, "-m", "dynascope.cli", *args], cwd=tmp, env=env, capture_output=True,
                          check=False, text=True, timeout=600)  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, str]:
    """(the run's output directory, what `dynascope run` printed to a pipe)."""
    pytest.importorskip("torch", reason="the run needs torch")
    d = tmp_path_factory.mktemp("width")
    (d / "train_wide.py").write_text(SCRIPT)
    result = _run(d, "run", "--backend", "aot_eager", "--no-html", "--out", "out", "train_wide.py")
    assert result.returncode == 0, result.stderr[-3000:]
    return d / "out", result.stdout


def tables(text: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """Each table in `text`: (title, header labels, cells of each body line), the columns found from the
    gaps (3 or more columns blank in the header and every body line) between them."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        if not line.strip() or set(line.strip()) != {"─"} or i < 1:
            continue
        body = _body(lines, i)
        grid = [lines[i - 1], *body]
        width = max(len(ln) for ln in grid)
        blank = [all(len(ln) <= x or ln[x] == " " for ln in grid) for x in range(width)]
        spans, start, x = [], None, 0
        while x < width:
            if not blank[x]:
                start = x if start is None else start
                x += 1
                continue
            run_end = x
            while run_end < width and blank[run_end]:
                run_end += 1
            if start is not None and (run_end - x >= 3 or run_end == width):
                spans.append((start, x))
                start = None
            x = run_end
        if start is not None:
            spans.append((start, width))
        header = [lines[i - 1][a:b].strip() for a, b in spans]
        rows = [[ln[a:b].strip() for a, b in spans] for ln in body if ln.strip()]
        title = ""
        for back in range(i - 3, max(i - 8, -1), -1):  # the title: its first line starts with a known title
            title = lines[back].strip() + (" " + title if title else "")
            if any(lines[back].startswith(t) for t in (*(t for t, _ in TITLES), "Totals")):
                break
        found.append((title, header, rows))
    return found


def _spec(title: str, header: list[str]) -> TableSpec | None:
    for prefix, attr in TITLES:
        if title.startswith(prefix):
            if attr is None:  # "Top N inductor kernels" or "Top N ops"
                attr = "by_kernel" if "inductor kernels" in title else "by_op"
            return SPEC_BY_ATTR[attr]
    return None


def _left_out(title: str) -> list[str]:
    m = re.search(r"\(not shown at this width: ([^)]*)\)", title)
    return [s.strip() for s in m.group(1).split(",")] if m else []


def check_tables(text: str, width: int, least: int = 1, diff: bool = False) -> list[str]:
    """Check every table in `text` printed at `width` (by `dynascope diff`: `diff`); their titles."""
    found = tables(text)
    assert len(found) >= least, text
    for title, header, rows in found:
        if diff:
            kinds = {label: DIFF_KINDS.get(label, "text") for label in header}
            order = ["count A", "count B", "verdict"]
            labels = [header[0], "count A", "count B", "A", "B", "Δ", "B/A", "verdict"] if header[0] else header
        else:
            spec = _spec(title, header)
            assert spec is not None, (title, header)
            kinds = {c.label: c.kind for c in spec.cols}
            order = [c.label for key in getattr(spec, "drop", ()) for c in spec.cols if c.key == key]
            labels = [c.label for c in spec.cols]
            if spec.attr == "by_step":  # the step parts are the `<part>_us` columns
                kinds |= {label: "us" for _, label in STEP_PARTS}
        for label in header:  # "call": the text column a table adds where two kernels match in every other
            assert label in kinds or label in ("why, and what to do", "call"), (title, label, header)
        # the columns left in keep the spec's order; those left out are the first of its drop order
        shown = [lab for lab in labels if lab in header]
        assert shown == [lab for lab in header if lab in labels], (title, header)
        gone = _left_out(title)
        assert not set(gone) & set(header), (title, header)
        # left out in the drop order; a column that tells two rows apart stays, though earlier in that order,
        # and the next one goes instead (test_rows_apart.py): so each one left out is at least in the order
        assert set(gone) <= set(order), (title, gone)
        for row in rows:
            assert len(row) == len(header), (title, header, row)
            for label, cell in zip(header, row, strict=True):
                kind = kinds.get(label, "text")
                if row[0] == "share" and kind == "us":  # the step table's last row: each part's share
                    kind = "share"
                if kind in CELL and cell:
                    assert "…" not in cell, (title, label, cell)
                    assert cell in NONE or re.fullmatch(CELL[kind], cell), (title, label, cell, row)
        numeric = [i for i, label in enumerate(header) if kinds.get(label, "text") in CELL]
        assert numeric, (title, header)  # at least one number column is left at any width
        assert all(any(r[i] for r in rows) for i in numeric), (title, header)
    return [t for t, _, _ in found]


def _body(lines: list[str], i: int) -> list[str]:
    body = []
    for ln in lines[i + 1 :]:
        if not ln.startswith(" "):
            break
        body.append(ln)
    return body


def _table_lines(text: str) -> list[str]:
    """The lines of the tables in `text`: headers, rules and bodies."""
    lines = text.splitlines()
    return [ln for i, line in enumerate(lines) if line.strip() and set(line.strip()) == {"─"}
            for ln in (lines[i - 1], line, *_body(lines, i))]  # fmt: skip


@pytest.mark.parametrize("width", WIDTHS)
def test_report_tables_fit_every_width_with_their_units_whole(run, width, capsys, monkeypatch):
    out, _ = run
    monkeypatch.setenv("COLUMNS", str(width))
    assert cli_main(["report", str(out), "--top", "20"]) == 0
    text = capsys.readouterr().out
    long = [ln for ln in text.splitlines() if len(ln) > width]
    assert not long, long
    titles = check_tables(text, width, least=6)
    for wanted in ("Steps: where each step's time goes", "Files:", "Ops", "Layers", "Compiled graphs"):
        assert any(t.startswith(wanted) for t in titles), (wanted, titles)
    if width == 60:  # a narrow width leaves columns out, and says which
        assert any(_left_out(t) for t in titles), titles


def test_piped_output_is_a_log_files_width(run, capsys, monkeypatch):
    """Not a terminal and no COLUMNS: 100 columns, for `dynascope report` and for what `dynascope run`
    printed (its tables; the paths of its outputs are lines of their own)."""
    out, printed = run
    monkeypatch.delenv("COLUMNS", raising=False)
    assert cli_main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    assert max(len(ln) for ln in text.splitlines()) <= 100
    check_tables(text, 100, least=6)
    assert "trained" in printed
    assert max(len(ln) for ln in _table_lines(printed)) <= 100
    titles = check_tables(printed, 100, least=1)
    assert any(t.startswith("Top ") for t in titles), titles


@pytest.mark.parametrize("width", [60, 100])
def test_explain_and_diff_tables_fit(run, width, capsys, monkeypatch, tmp_path):
    out, _ = run
    monkeypatch.setenv("COLUMNS", str(width))
    assert cli_main(["explain", str(out)]) == 0
    text = capsys.readouterr().out
    costs = text[text.index("Recompiles by cost"):]  # the explanation's own code lines are not wrapped
    assert max(len(ln) for ln in costs.splitlines()) <= width
    assert re.search(r"compile time \d+(\.\d+)? (ms|s)", costs) or check_tables(costs, width)
    other = build_trace().write(tmp_path / "train-4242.pfw.gz")
    assert cli_main(["diff", str(out), str(other)]) == 0
    text = capsys.readouterr().out
    assert max(len(ln) for ln in text.splitlines()) <= width
    check_tables(text, width, least=2, diff=True)


@pytest.mark.slow
def test_inductor_kernel_table_keeps_its_units(tmp_path, capsys, monkeypatch):
    """The table of the issue ("18.5 m   597 µ"): inductor kernels, with their fused ops and layers."""
    (tmp_path / "train_wide.py").write_text(SCRIPT)
    result = _run(tmp_path, "run", "--backend", "inductor", "--no-html", "--out", "out", "train_wide.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert max(len(ln) for ln in _table_lines(result.stdout)) <= 100
    assert any(t.startswith("Top ") and "inductor kernels" in t for t in check_tables(result.stdout, 100))
    for width in WIDTHS:
        monkeypatch.setenv("COLUMNS", str(width))
        assert cli_main(["report", str(tmp_path / "out"), "--top", "20"]) == 0
        text = capsys.readouterr().out
        assert max(len(ln) for ln in text.splitlines()) <= width
        titles = check_tables(text, width, least=6)
        assert any(t.startswith("Kernels (inductor)") for t in titles), titles


def test_fit_keeps_numbers_whole_and_drops_in_order():
    """The arithmetic alone: numbers keep their width; text narrows first; then the drop order."""
    FitCol, fit_widths = _fmt.FitCol, _fmt.fit_widths
    cols = [FitCol(6, 40, False, 20), FitCol(5, 7, True), FitCol(4, 7, True), FitCol(6, 30, False, 10)]
    assert fit_widths(200, cols, (3, 2)) == [40, 7, 7, 30]
    assert fit_widths(80, cols, (3, 2)) == [28, 7, 7, 27]  # text narrows (evenly), nothing left out
    assert fit_widths(50, cols, (3, 2)) == [28, 7, 7, None]  # the first of the drop order goes
    # then the next; then the text under its min_width (20), down to its header; numbers never narrower
    assert fit_widths(30, cols, (3, 2)) == [18, 7, None, None]


def test_the_wide_run_holds_every_invariant(run):
    out, stdout = run
    assert_invariants(out, stdout)
