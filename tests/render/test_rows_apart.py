"""What a fitted terminal table and a wrapped line must still say (issue 25, part B's follow-up):

- no two rows of a table read alike where the rows differ: a left-out column that tells them apart is
  kept, a name cut with "…" is cut in its middle where its start is all that rows share, and two kernels
  alike in every column (two `extern_kernels.mm` of one layer's backward) show the call that launches them;
- a step part the width leaves out is counted in "other" (the title says so), so that the parts shown add
  to each step's wall time;
- a wrapped line never breaks between a figure and its unit ("backward 5.32 / ms").

A real `dynascope run` of a small MLP compiled with inductor (a checkpoint saved inside each step), its
report printed at several widths and checked with the corpus's invariant checker.
"""

from __future__ import annotations

import io
import itertools
import os
import sys
import textwrap
from pathlib import Path

import pytest
from rich.console import Console
from rich.text import Text
from support import procs
from support.invariants import (
    assert_invariants,
    check_step_table,
    check_table_duplicates,
    check_terminal,
    terminal_tables,
)

from dynascope.console import make_console
from dynascope.render._analysis import summarize_paths
from dynascope.render.terminal import render_short, render_summary

SCRIPT = textwrap.dedent(
    """
    import os
    import torch

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(16, 32)
            self.fc2 = torch.nn.Linear(32, 4)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))

    torch.manual_seed(0)
    model = MLP()
    compiled = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(4):
        x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
        torch.nn.functional.cross_entropy(compiled(x), y).backward()
        opt.step()
        opt.zero_grad()
        torch.save(model.state_dict(), os.path.join(os.getcwd(), f"ckpt-{step}.pt"))
    print("trained")
    """
)

WIDTHS = (60, 70, 80, 90, 100, 120)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, str]:
    pytest.importorskip("torch", reason="the run needs torch")
    d = tmp_path_factory.mktemp("apart")
    (d / "mlp.py").write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    result = procs.run([sys.executable, "-m", "dynascope.cli", "run", "--no-html", "--out", "out", "mlp.py"],
                            cwd=d, env=env, capture_output=True, text=True, check=False, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return d / "out", result.stdout


def _printed(fn, out: Path, width: int, **kwargs) -> str:
    summary = summarize_paths([str(p) for p in out.glob("*.pfw*")], top=20)
    buf = io.StringIO()
    fn(summary, make_console(buf, width=width, color=False), **kwargs)
    return buf.getvalue()


@pytest.mark.parametrize("width", WIDTHS)
def test_no_two_rows_read_alike_at_any_width(run, width):
    out, _ = run
    text = _printed(render_summary, out, width)
    tables = terminal_tables(text, f"report at {width}")
    kernels = [t for t in tables if t.title.startswith("Kernels")]
    assert kernels, text
    failures = [f for t in tables for f in check_table_duplicates(t)]
    assert not failures, "\n".join(failures) + "\n" + text
    # the two `extern_kernels.mm` of fc1's backward (gradients of its input and its weight) differ only in
    # the call that launches them: it is shown
    assert "call" in kernels[0].header, text


def test_the_run_summary_kernel_rows_read_apart(run):
    out, stdout = run
    text = _printed(render_short, out, 100)
    failures = [f for t in terminal_tables(text, "run") for f in check_table_duplicates(t)]
    assert not failures, "\n".join(failures) + "\n" + text
    assert not [f for f in check_terminal(stdout, "run stdout", run_output=True) if f.startswith("[duplicate]")]


@pytest.mark.parametrize("width", WIDTHS)
def test_shown_step_parts_add_to_the_wall_time(run, width):
    out, _ = run
    text = _printed(render_summary, out, width)
    steps = [t for t in terminal_tables(text, f"report at {width}") if "wall" in t.header and "step" in t.header]
    assert steps, text
    table = steps[0]
    assert not check_step_table(table), "\n".join(check_step_table(table)) + "\n" + text
    # where the width left I/O out (every checkpoint is saved inside a step), its time is in "other"
    if "I/O" not in table.header:
        assert "I/O counted in other" in " ".join(text.split()), text


def test_a_part_left_out_is_counted_in_other(run):
    out, _ = run
    text = _printed(render_summary, out, 60)
    table = next(t for t in terminal_tables(text, "60") if "wall" in t.header and "step" in t.header)
    assert "I/O" not in table.header and "other" in table.header, text
    assert "I/O counted in other" in " ".join(text.split()), text


UNIT_START = ("ns", "µs", "us", "ms", "s", "min", "h", "%", "kB", "MB", "B")


def _splits(text: str) -> list[tuple[str, str]]:
    lines = text.split("\n")
    return [
        (a, b) for a, b in itertools.pairwise(lines)
        if a.rstrip()[-1:].isdigit() and b.strip().split(" ")[0].rstrip(",);") in UNIT_START
    ]  # fmt: skip


def test_wrapping_never_cuts_a_figure_from_its_unit():
    from dynascope.console import Prose, wrap_text

    # the demo's slowest-steps line, which rich's own wrapping broke as "backward +1.05 / ms"
    line = ("  step 3 took 3.43 s (+3.43 s over the median step): compile +3.43 s (recompile: 1 compile started: "
            "0/1); also other Python +1.06 ms, backward +1.05 ms")  # fmt: skip
    split_by_rich = []
    for width in range(20, 121):
        plain = Console(file=io.StringIO(), width=width, no_color=True)
        plain.print(Text(line))
        split_by_rich += _splits(plain.file.getvalue())  # type: ignore[attr-defined]
    assert split_by_rich  # what this guards against
    for width in range(20, 121):
        buf = io.StringIO()
        make_console(buf, width=width, color=False).print(Prose(line))
        printed = buf.getvalue()
        assert not _splits(printed), (width, printed)
        assert all(len(row) <= width for row in printed.splitlines()), (width, printed)
        assert " ".join(printed.split()) == " ".join(line.split())  # the same words, none lost
    # "2 min 5 s" stays one figure; a word longer than the width is left whole on its line
    assert [t.plain for t in wrap_text(Text("took 2 min 5 s"), 9)] == ["took", "2 min 5 s"]


@pytest.mark.parametrize("width", WIDTHS)
def test_the_real_outputs_never_cut_a_figure_from_its_unit(run, width):
    out, _ = run
    for fn in (render_summary, render_short):
        text = _printed(fn, out, width)
        assert not _splits(text), (width, _splits(text))
        assert not [f for f in check_terminal(text, "x", piped_width=None) if "cuts a figure" in f]


def test_cut_names_that_would_read_alike_are_cut_where_they_differ():
    """The table arithmetic alone: names alike in their first cells (torch's op names, module paths) keep
    the part that tells them apart, at a width that cuts them."""
    from dynascope.render._table import Column, fit_table

    ops = ["function._scaled_dot_product_flash_attention_for_cpu.default",
           "function._scaled_dot_product_flash_attention_for_cpu_backward.default",
           "function._scaled_dot_product_flash_attention_for_cpu.default"]  # fmt: skip
    # rows 0 and 2 differ only in the middle of their layer's path
    layers = ["transformer.h.0.attn.c_attn", "transformer.h.0.attn.c_attn", "transformer.h.1.attn.c_attn"]
    table = fit_table("Ops", [Column("op", False, 20, 48), Column("layer", False, 10, 20, cut_start=True),
                              Column("total", True)])  # fmt: skip
    for op, layer, total in zip(ops, layers, ("1 ms", "2 ms", "3 ms"), strict=True):
        table.add_row(op, layer, total)
    for width in (40, 50, 60):
        buf = io.StringIO()
        make_console(buf, width=width, color=False).print(table)
        rows = [line.split() for line in buf.getvalue().splitlines()[4:] if line.strip()]
        assert len(rows) == 3 and len({tuple(r[:2]) for r in rows}) == 3, buf.getvalue()
        assert all(len(line) <= width for line in buf.getvalue().splitlines())
        if width >= 50:  # the start kept where room allows
            assert all(r[0].startswith("function.") for r in rows), buf.getvalue()


def test_the_run_holds_every_invariant(run):
    out, stdout = run
    assert_invariants(out, stdout)
