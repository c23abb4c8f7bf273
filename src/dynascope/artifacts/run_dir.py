"""What a run leaves on disk, by name, and how a reader finds it: the one place these names are spelled.

A run's output directory (`dynascope run --out DIR`) holds the trace (`<script>-<pid>.pfw.gz`),
EXPLANATION_FILE with one .py file per compiled function beside it, COMPILE_PROFILE_FILE with
`--compile-profile`, REPORT_FILE, and EAGER_DIR/ with `--compare-eager`. A many-rank job puts each rank's
explanation and compile profile in `rank<R>/` (rank_dir_name) and the ranks' completion markers in
MARKERS_DIR/ (launch.py).

Reading follows one rule: a file that cannot be read, or does not hold a JSON object, becomes an object
holding one note (with `_unreadable` set), so that every view shows why a section is missing instead of
failing; the summary's reader turns that into a warning and reads the trace alone.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

if TYPE_CHECKING:
    from dynascope.artifacts.explanation import Report

EXPLANATION_FILE = "explanation.json"  # what `dynascope run` and `dynascope explain --out` write
COMPILE_PROFILE_FILE = "compile_profile.json"  # what `dynascope compile-profile --json` / `run --compile-profile` write
REPORT_FILE = "report.html"
EAGER_DIR = "eager"  # the eager comparison run's traces (`dynascope run --compare-eager`)
MARKERS_DIR = ".ranks"  # each rank's completion marker in a many-rank job


def rank_dir_name(rank: int) -> str:
    """The directory of one rank's explanation and compile profile, under the job's output directory."""
    return f"rank{rank}"


def find_beside(paths: str | os.PathLike | Iterable[str | os.PathLike], name: str) -> str | None:
    """`name` (e.g. explanation.json) in the directory given, or beside the first trace that has one."""
    for raw in [paths] if isinstance(paths, (str, os.PathLike)) else list(paths):
        p = os.fspath(raw)
        for d in ([p] if os.path.isdir(p) else []) + [os.path.dirname(os.path.abspath(p))]:
            candidate = os.path.join(d, name)
            if os.path.isfile(candidate):
                return candidate
    return None


def find_explanation(trace_paths: Iterable[str | os.PathLike], name: str = EXPLANATION_FILE) -> Path | None:
    """`explanation.json` (or `name`) beside the first trace that has one (in its directory, or the
    directory itself)."""
    found = find_beside(list(trace_paths), name)
    return Path(found) if found else None


def find_compile_profile(trace_paths: Iterable[str | os.PathLike]) -> Path | None:
    """`compile_profile.json` beside the first trace that has one."""
    return find_explanation(trace_paths, COMPILE_PROFILE_FILE)


def load_explanation(path: str | os.PathLike) -> dict:
    """explanation.json as plain data, with its path as `_path` (the module docstring's rule on damage)."""
    return load_json_object(path, "explanation sections skipped")


def load_report(path: str | os.PathLike) -> tuple[Report | None, str | None]:
    """explanation.json as the typed Report, with None; or None, with the note that says why the file
    could not be read."""
    from dynascope.artifacts.explanation import Report

    loaded = load_explanation(path)
    if loaded.get("_unreadable"):
        return None, loaded["notes"][0]
    return Report.from_dict(loaded), None


def load_compile_profile(path: str | os.PathLike) -> dict:
    """compile_profile.json as plain data (the profile section reads its keys, missing ones empty)."""
    return load_json_object(path, "compile profile skipped")


def load_json_object(path: str | os.PathLike, skipped: str) -> dict:
    """A JSON object file of a run, with its path as `_path`; one that cannot be read becomes an object
    holding one note and `_unreadable` (the views are written without that section, and say why)."""
    path = Path(path)
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        return {"notes": [f"could not read {path}: {exc}"], "_path": str(path), "_unreadable": True}
    if not isinstance(data, dict):
        return {"notes": [f"{path} does not hold a JSON object; {skipped}"], "_path": str(path), "_unreadable": True}
    data.setdefault("_path", str(path))
    return data
