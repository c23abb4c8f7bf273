"""The one way a benchmark hands back its figures: print its table, write its JSON."""

from __future__ import annotations

import json
import os


def publish(table: str, results: dict, path: str) -> None:
    """Print `table` and write `results` to `path` (benchmarks/results/<name>.json by default)."""
    print(table)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as handle:
        json.dump(results, handle, indent=2)
    print(f"wrote {path}")
