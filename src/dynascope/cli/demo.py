"""`dynascope demo`: `dynascope run` on the built-in demo training script."""

from __future__ import annotations

import argparse
import os

from dynascope import demo
from dynascope.cli import run as runner


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="dynascope demo",
        description="Trace and explain a small ConvNet training loop on synthetic data (no setup needed).",
    )
    parser.add_argument("--out", default="dynascope-demo", help="output directory (default: ./dynascope-demo)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--backend", choices=runner.BACKEND_CHOICES, default="auto")
    ns = parser.parse_args(argv)
    script = os.path.join(os.path.dirname(demo.__file__), "train.py")  # the demo program
    return runner.main(
        ["--out", ns.out, "--backend", ns.backend, script, "--epochs", str(ns.epochs), "--steps", str(ns.steps)]
    )
