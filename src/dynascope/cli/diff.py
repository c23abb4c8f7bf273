"""`dynascope diff A B [--top N] [--json]`: two traces side by side, per op and per layer."""

from __future__ import annotations

import argparse
import sys

import orjson

from dynascope.render._analysis import summarize_paths
from dynascope.render.diff_view import diff_tables, diff_to_dict, render_diff


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dynascope diff",
        description="Compare two traces (before/after a change): time and counts per op and per layer in A and B, "
        "the delta, the ratio B/A, and what got faster or slower.",
    )
    parser.add_argument("a", metavar="A", help="the baseline trace (file, directory or glob)")
    parser.add_argument("b", metavar="B", help="the trace to compare with it")
    parser.add_argument(
        "--top", type=int, default=20, metavar="N", help="rows per table, largest changes first (default 20)"
    )
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    # Every row takes part in the comparison: summarise with a top large enough to keep all ops.
    a = summarize_paths([args.a], top=max(args.top, 1_000_000))
    b = summarize_paths([args.b], top=max(args.top, 1_000_000))
    tables = diff_tables(a, b)
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(diff_to_dict(tables, args.a, args.b), option=orjson.OPT_INDENT_2) + b"\n")
        sys.stdout.flush()
        return 0
    from dynascope.render.terminal import make_console

    render_diff(tables, args.a, args.b, make_console(), top=args.top)
    return 0
