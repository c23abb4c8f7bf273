"""`dynascope convert TRACE... -o out.json`: Chrome-trace JSON that Perfetto and chrome://tracing open."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dynascope.render.chrome import convert


def default_output(first: Path) -> Path:
    """`run/trace-71.pfw.gz` → `run/trace-71.chrome.json`; a directory → `<dir>/trace.chrome.json`."""
    if first.is_dir():
        return first / "trace.chrome.json"
    name = first.name
    for suffix in (".pfw.gz", ".json.gz", ".pfw", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return first.with_name(name + ".chrome.json")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dynascope convert",
        description="Write Chrome-trace JSON (properly nested, one track per process and thread, args resolved) "
        "that ui.perfetto.dev and chrome://tracing open.",
    )
    parser.add_argument("traces", nargs="+", metavar="TRACE", help=".pfw / .pfw.gz / .json files, directories or globs")
    parser.add_argument(
        "-o", "--out", type=Path, help="output file (.json, or .json.gz to compress); default: beside the first trace"
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    out = args.out or default_output(Path(args.traces[0]))
    stats = convert(args.traces, out)
    if not args.quiet:
        for warning in stats.warnings:
            print(f"dynascope convert: warning: {warning}", file=sys.stderr)
        clipped = f", {stats.clipped} clipped to their parent" if stats.clipped else ""
        print(
            f"wrote {out}: {stats.events:,} events on {stats.threads} thread(s) in {stats.processes} process(es)"
            f" from {len(stats.files)} file(s){clipped}"
        )
        print("open it at https://ui.perfetto.dev (Open trace file) or chrome://tracing (Load)")
    return 0
