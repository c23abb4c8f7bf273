"""The synthetic compiled-DDP rank traces of benchmarks/bench_ranks.py, for the collective analysis tests."""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

from dynascope.analyze.pipeline import summarize_files

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_ranks.py"


def bench_ranks():
    spec = importlib.util.spec_from_file_location("bench_ranks", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def job(directory: Path, world: int = 2, steps: int = 5, **kw):
    """(paths, Summary) of a synthetic job written to `directory` (options: write_job's)."""
    paths, _ = bench_ranks().write_job(directory, world, steps, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return paths, summarize_files([str(p) for p in paths])
