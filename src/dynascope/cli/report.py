"""`dynascope report TRACE... [--top N] [--json] [--csv DIR|FILE] [--html OUT.html]
[--scheduler ADDR | --workers N]`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

from dynascope.errors import ConfigError
from dynascope.render._analysis import summarize_paths, summary_to_dict, write_csv


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


def _eager_beside(traces: list[str]) -> Path | None:
    """The eager/ directory a `dynascope run --compare-eager` wrote, under a directory given or beside a trace."""
    from dynascope.analyze.read.paths import EAGER_DIR

    for raw in traces:
        p = Path(raw)
        for d in ([p] if p.is_dir() else []) + [p.parent]:
            if (d / EAGER_DIR).is_dir() and any((d / EAGER_DIR).glob("*.pfw*")):
                return d / EAGER_DIR
    return None


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers must be at least 1 (got {args.workers})")
    from dynascope.render.html import find_compile_profile, find_explanation, load_explanation

    if args.explanation is not None and not args.explanation.is_file():
        raise ConfigError(
            f"--explanation {args.explanation}: no such file; "
            "give the explanation.json that `dynascope explain --out` or `dynascope run` wrote"
        )
    if args.eager is not None and not args.eager.exists():
        raise ConfigError(f"--eager {args.eager}: no such directory; give the eager/ directory that "
                          "`dynascope run --compare-eager` wrote, or traces of an eager run")  # fmt: skip
    source = args.explanation or find_explanation(args.traces)
    explanation = load_explanation(source) if source is not None else None
    if explanation is not None and args.library_frames:
        explanation["library_frames"] = True
    if args.explanation is None and explanation is not None:
        explanation["_beside"] = True  # found beside the traces: a job's gives way to every rank's (docs/ranks.md)
    summary = summarize_paths(args.traces, top=args.top, scheduler=args.scheduler, workers=args.workers,
                              explanation=explanation)  # fmt: skip
    if explanation is not None:
        explanation.pop("_beside", None)
    if args.explanation is None and len(summary.explanations) > 1:  # a job: every rank's explanation was read
        from dynascope.analyze.ranks import merged_explanation

        explanation = merged_explanation(summary.explanations)
        source = f"ranks {', '.join(str(r) for r in summary.explanations)}"
    notes: list[str] = []
    eager = args.eager or _eager_beside(args.traces)
    if eager is not None:
        from dynascope.analyze.payoff import with_eager

        summary = with_eager(summary, summarize_paths([eager], top=args.top))
        notes.append(f"compared with the eager run in {eager}")
    if args.csv is not None:
        written = write_csv(summary, args.csv)
        notes.append(f"wrote {len(written)} CSV file(s): {', '.join(str(p) for p in written)}")
    if args.html is not None:
        from dynascope.render.html import write_html

        if args.compile_profile is not None and not args.compile_profile.is_file():
            raise ConfigError(
                f"--compile-profile {args.compile_profile}: no such file; "
                "give the compile_profile.json that `dynascope compile-profile --json` wrote"
            )
        profile = args.compile_profile or find_compile_profile(args.traces)
        out = write_html(summary, args.html, explanation=explanation, title=args.title, compile_profile=profile)
        notes.append(f"wrote {out}" + (f" (with the explanation from {source})" if source else "")
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
