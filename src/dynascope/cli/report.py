"""`dynascope report TRACE... [--top N] [--json] [--csv DIR|FILE] [--html OUT.html]
[--scheduler ADDR | --workers N]`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

from dynascope.artifacts.explanation import Report
from dynascope.errors import ConfigError
from dynascope.render._analysis import summary_to_dict, write_csv


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dynascope report",
        description="Summarise traces: where the time goes per op, layer, phase, graph, step and process, "
        "and what compilation cost. Tables in the terminal, --json, --csv, --html.",
    )
    parser.add_argument(
        "traces", nargs="+", metavar="TRACE", help="trace files (.pfw, .pfw.gz, .json[.gz]), directories or globs"
    )
    parser.add_argument("--top", type=int, default=20, metavar="N", help="rows per table (default 20)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON instead of tables")
    parser.add_argument(
        "--csv",
        type=Path,
        metavar="DIR|FILE",
        help="write CSV: a directory gets one file per table, a .csv file the per-op table",
    )
    parser.add_argument(
        "--html", type=Path, metavar="OUT.html", help="write a self-contained HTML report (opens without network)"
    )
    parser.add_argument(
        "--explanation",
        type=Path,
        metavar="JSON",
        help="explanation.json of the same run, for why each graph break and recompile happened, and the HTML's "
        "explanation sections (default: the one beside the trace, if any)",
    )
    parser.add_argument(
        "--compile-profile", type=Path, metavar="FILE",
        help="compile_profile.json to include (default: the one beside the trace, if any)",
    )  # fmt: skip
    parser.add_argument(
        "--eager", type=Path, metavar="DIR",
        help="traces of the same program run eagerly, to compare against (default: the eager/ directory that "
             "`dynascope run --compare-eager` wrote beside the traces, if any)",
    )  # fmt: skip
    parser.add_argument("--title", help="title of the HTML report")
    parser.add_argument(
        "--library-frames", action="store_true",
        help="charge graph breaks and recompiles to the library line torch names (torch.nn's, an installed "
             "package's), not to the first line of your own code that led there",
    )  # fmt: skip
    dask = parser.add_mutually_exclusive_group()
    dask.add_argument("--scheduler", metavar="ADDR", help="summarise on this Dask scheduler (e.g. tcp://host:8786)")
    dask.add_argument("--workers", type=int, metavar="N", help="summarise on a local Dask cluster of N workers")
    parser.add_argument("-q", "--quiet", action="store_true", help="no terminal tables (with --html/--csv)")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers must be at least 1 (got {args.workers})")
    from dynascope.render.outputs import load_run, summarize_run

    if args.explanation is not None and not args.explanation.is_file():
        raise ConfigError(
            f"--explanation {args.explanation}: no such file; "
            "give the explanation.json that `dynascope explain --out` or `dynascope run` wrote"
        )
    if args.eager is not None and not args.eager.exists():
        raise ConfigError(f"--eager {args.eager}: no such directory; give the eager/ directory that "
                          "`dynascope run --compare-eager` wrote, or traces of an eager run")  # fmt: skip
    if args.compile_profile is not None and not args.compile_profile.is_file():
        raise ConfigError(
            f"--compile-profile {args.compile_profile}: no such file; "
            "give the compile_profile.json that `dynascope compile-profile --json` wrote"
        )
    run = load_run(args.traces, explanation=args.explanation, eager=args.eager,
                   compile_profile=args.compile_profile, library_frames=args.library_frames)  # fmt: skip
    summary = summarize_run(run, top=args.top, scheduler=args.scheduler, workers=args.workers)
    explanation, source = run.explanation, run.explanation_source
    notes: list[str] = []
    if run.explanation_note is not None:
        notes.append(f"{run.explanation_note}; the graph-break and recompile tables give what the trace alone says")
    if run.eager:
        notes.append(f"compared with the eager run in {run.eager[0]}")
    if args.csv is not None:
        written = write_csv(summary, args.csv)
        notes.append(f"wrote {len(written)} CSV file(s): {', '.join(str(p) for p in written)}")
    if args.html is not None:
        from dynascope.render.html import write_html

        profile = run.compile_profile
        shown = explanation if run.explanation_note is None else Report(notes=[run.explanation_note])
        out = write_html(summary, args.html, explanation=shown, title=args.title, compile_profile=profile,
                         explanation_path=source)  # fmt: skip
        notes.append(f"wrote {out}" + (f" (with the explanation from {source})" if explanation is not None else "")
                     + (f" (with the compile profile from {profile})" if profile else ""))
    if args.json:
        sys.stdout.buffer.write(
            orjson.dumps(summary_to_dict(summary), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n"
        )
        sys.stdout.flush()
        for note in notes:
            print(note, file=sys.stderr)
        return 0
    if not args.quiet:
        from dynascope.render.terminal import render_summary

        render_summary(summary, top=args.top)
    for note in notes:
        print(note)
    return 0
