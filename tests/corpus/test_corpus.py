"""The corpus: third-party-style programs run unmodified under `dynascope run`, as a user runs them
(a subprocess, its own working directory, stdout piped), and every invariant of invariants.py checked
on every output of each run: the terminal, `report --json`, `--csv`, the terminal report,
report.html, explanation.json, `dynascope explain DIR` and the traces (issue 25, item 7).

The default suite runs each program at its smallest size: nanoGPT and the serving loop compile with
inductor, as they ask; the Trainer and the torchvision loop are asked for aot_eager through their own
options (`--torch_compile_backend`, `--backend`) to keep the default suite short on 2 cores. The slow
suite (`make test-all`) runs all four with inductor at larger sizes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import procs
from support.invariants import check, collect, report

PROGRAMS = Path(__file__).parent / "programs"


@dataclass(frozen=True)
class Case:
    program: str
    args: tuple[str, ...]
    expect: tuple[str, ...] = ()  # what the program itself printed, so that the run is known to have done its work


NANOGPT_TINY = ("--max_iters=3", "--eval_interval=2", "--eval_iters=1", "--warmup_iters=1", "--lr_decay_iters=3")
HF_TINY = ("--max_steps", "4", "--save_steps", "2", "--eval_steps", "2", "--logging_steps", "2", "--train_samples", "16")
TORCHVISION_TINY = ("--epochs", "1", "--train-size", "12", "--val-size", "4", "--batch-size", "8", "--workers", "2")

DEFAULT = {
    "nanogpt": Case("nanogpt_train.py", NANOGPT_TINY, ("saving checkpoint to out",)),
    "inference_loop": Case("inference_loop.py", ("--requests", "5"), ("served 5 requests",)),
    "hf_trainer": Case("hf_trainer.py", (*HF_TINY, "--torch_compile_backend", "aot_eager"), ('"train_runtime"',)),
    "torchvision": Case("torchvision_train.py", (*TORCHVISION_TINY, "--backend", "aot_eager"), ("Training time",)),
}
LARGER = {
    "nanogpt": Case("nanogpt_train.py", ("--max_iters=20", "--n_layer=4", "--n_embd=64", "--eval_interval=10"), ("saving checkpoint",)),
    "inference_loop": Case("inference_loop.py", ("--requests", "30", "--hidden", "256", "--max-batch", "32"), ("served 30 requests",)),
    "hf_trainer": Case("hf_trainer.py", ("--max_steps", "12", "--n_layer", "4", "--train_samples", "64"), ('"train_runtime"',)),
    "torchvision": Case("torchvision_train.py", ("--epochs", "2", "--train-size", "40", "--val-size", "16"), ("Training time",)),
}


def run_under_dynascope(case: Case, cwd: Path, *options: str) -> tuple[subprocess.CompletedProcess, Path]:
    """`dynascope run --out out PROGRAM ARGS` in `cwd`, stdout and stderr piped (a log file's width)."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    result = procs.run(
        [sys.executable, "-m", "dynascope.cli", "run", "--out", "out", *options, str(PROGRAMS / case.program), *case.args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    return result, cwd / "out"


def check_run(case: Case, tmp_path: Path) -> None:
    result, out = run_under_dynascope(case, tmp_path)
    (tmp_path / "run_stdout.txt").write_text(result.stdout)  # to re-check by hand: python -m support.invariants out --stdout run_stdout.txt
    assert result.returncode == 0, result.stderr[-4000:]
    for text in case.expect:
        assert text in result.stdout, result.stdout[-3000:]
    outputs = collect(out, result.stdout)
    # every view is there, so that no invariant passes for want of an output
    assert outputs.traces and outputs.report_json and outputs.csv_tables and outputs.report_text
    assert outputs.html and outputs.explanation and outputs.explain_text
    failures = check(outputs)
    assert not failures, f"{case.program}: {len(failures)} invariants broken:" + report(failures)


@pytest.mark.parametrize("name", list(DEFAULT))
def test_corpus_program_holds_every_invariant(name, tmp_path):
    check_run(DEFAULT[name], tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(LARGER))
def test_corpus_program_holds_every_invariant_larger_with_inductor(name, tmp_path):
    check_run(LARGER[name], tmp_path)


def test_the_programs_run_without_dynascope(tmp_path):
    """The corpus programs are plain programs: no dynascope import, and they run on their own."""
    for path in PROGRAMS.glob("*.py"):
        assert "dynascope" not in path.read_text(), path
    case = DEFAULT["inference_loop"]
    result = procs.run(
        [sys.executable, str(PROGRAMS / case.program), *case.args, "--backend", "eager"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0 and "served 5 requests" in result.stdout, result.stderr[-3000:]
