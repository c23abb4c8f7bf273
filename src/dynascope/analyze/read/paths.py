"""Which files a trace argument names: a file, a directory (its trace files, recursively), a glob, or a
list of these. The one rule every command uses (report, convert, view, diff, Dask).

In a directory, `.pfw` and `.pfw.gz` files are traces by name; a `.json` or `.json.gz` is one only if it
looks like Chrome-trace JSON, and never `explanation.json` nor what `dynascope convert` wrote
(`*.chrome.json[.gz]`), which would count every event twice. A subdirectory `eager/` holds the traces of
the eager comparison run (`dynascope run --compare-eager`): another run of the program, so it is read only
when named itself.
"""

from __future__ import annotations

import glob
import os
import zlib
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from dynascope.analyze.read._inflate import GZIP_MAGIC
from dynascope.artifacts.run_dir import EAGER_DIR, EXPLANATION_FILE
from dynascope.errors import TraceFormatError

__all__ = ["CONVERTED_SUFFIXES", "TRACE_SUFFIXES", "expand_paths", "is_trace_file", "map_files"]

TRACE_SUFFIXES = (".pfw", ".pfw.gz", ".json", ".json.gz")
CONVERTED_SUFFIXES = (".chrome.json", ".chrome.json.gz")  # what `dynascope convert` writes by default
_NOT_TRACES = (EXPLANATION_FILE,)

T = TypeVar("T")


def expand_paths(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Path]:
    """Every trace file that `paths` names, in order, each once; a name that finds none is an error."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    found: dict[Path, None] = {}
    for p in paths:
        for f in _expand_one(os.fspath(p)):
            found.setdefault(f, None)
    return list(found)


def _expand_one(text: str) -> list[Path]:
    path = Path(text)
    if path.is_dir():
        found = sorted(q for q in path.rglob("*") if q.is_file() and is_trace_file(q)
                       and EAGER_DIR not in q.relative_to(path).parts[:-1])  # fmt: skip
        if not found:
            raise TraceFormatError(f"{path}: directory holds no trace files (*.pfw, *.pfw.gz, *.json, *.json.gz)")
        return found
    if path.is_file():
        return [path]
    if any(ch in text for ch in "*?["):
        hits = [Path(h) for h in sorted(glob.glob(text, recursive=True)) if os.path.isfile(h)]
        if not hits:
            raise TraceFormatError(f"{text}: no file matches this pattern; check the path")
        return hits
    raise TraceFormatError(f"{text}: no such file or directory; give a .pfw/.pfw.gz/.json trace or a directory of them")


def is_trace_file(path: Path) -> bool:
    """Whether a file found in a directory is a trace (see the module docstring)."""
    name = path.name
    if name in _NOT_TRACES or name.endswith(CONVERTED_SUFFIXES):
        return False
    if name.endswith((".pfw", ".pfw.gz")):
        return True
    return name.endswith((".json", ".json.gz")) and _looks_like_chrome(path)


def _looks_like_chrome(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            head = fh.read(1 << 16)
        if head.startswith(GZIP_MAGIC):
            head = zlib.decompressobj(31).decompress(head, 1 << 16)
    except (OSError, zlib.error):  # unreadable or not gzip after all: not a trace to pick up
        return False
    head = head[:8192]
    return b'"traceEvents"' in head or (head.lstrip().startswith(b"[") and b'"ph"' in head)


def map_files(fn: Callable[[Path], T], files: list[Path], threads: int | None = None) -> list[T]:
    """Apply fn to each file, in threads (inflating and polars release the GIL); results in order."""
    if threads is None:
        threads = min(len(files), max(1, min(4, os.cpu_count() or 1)))
    if threads <= 1 or len(files) <= 1:
        return [fn(p) for p in files]
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(fn, files))
