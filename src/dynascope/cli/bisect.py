"""`dynascope bisect SCRIPT [args] [--backend NAME|module:attr ...] [--json OUT] [--repro DIR]`."""

from __future__ import annotations

import argparse
import os
import sys

import orjson

from dynascope.cli._script_line import parse_script_line
from dynascope.console import make_console
from dynascope.debug.bisect.result import BisectResult
from dynascope.debug.bisect.search import bisect_script
from dynascope.scriptrun import check_script


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dynascope bisect",
        description="Find the first stage of torch.compile (eager, aot_eager, aot_eager_decomp_partition, "
        "inductor, your backends) that breaks or changes what a script computes, the op responsible and its "
        "line in your code, and write a standalone repro. Exit 0: every stage agrees; 1: a stage is bad.",
    )
    parser.add_argument("--backend", action="append", default=[], metavar="NAME|module:attr",
                        help="also bisect this backend (a registered name or module:attr); repeatable")  # fmt: skip
    parser.add_argument("--stages", metavar="LIST",
                        help="built-in stages to run, comma-separated (default: eager,aot_eager,"
                        "aot_eager_decomp_partition,inductor); your --backend ones run after them")  # fmt: skip
    parser.add_argument("--json", metavar="OUT", help="write the result as JSON (docs/debug.md)")
    parser.add_argument("--repro", metavar="DIR", default="dynascope-repro",
                        help="where to write the repro of the bad graph (default ./dynascope-repro)")  # fmt: skip
    parser.add_argument("--no-repro", action="store_true", help="do not write a repro")
    parser.add_argument("--calls", type=int, default=2, metavar="N",
                        help="compare the first N calls of each compiled model or function (default 2)")  # fmt: skip
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument("script", help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    return parser


def main(argv: list[str]) -> int:
    args = parse_script_line(build_parser(), argv)
    check_script(args.script)
    if args.calls < 1:
        from dynascope.errors import ConfigError

        raise ConfigError(f"--calls must be at least 1 (got {args.calls})")
    sys.path.insert(0, os.getcwd())  # module:attr backends next to the script's working directory
    builtin = [name.strip() for name in args.stages.split(",") if name.strip()] if args.stages else None
    result = bisect_script(args.script, args.args, args.backend, None if args.no_repro else args.repro,
                           progress=not args.quiet, calls=args.calls, stages=builtin)  # fmt: skip
    if args.json:
        with open(args.json, "wb") as out:
            out.write(orjson.dumps(result.to_dict(), option=orjson.OPT_INDENT_2))
    print_result(result)
    return result.exit_code


def print_result(result: BisectResult) -> None:
    console = make_console(soft_wrap=True)
    for line in result_lines(result):
        console.print(line, markup=False)


def result_lines(result: BisectResult) -> list[str]:
    """The report, as plain lines: what happened, where in the user's code, and what to do next."""
    lines = ["stages: " + ", ".join(f"{s.stage} {s.status}" for s in result.stages) or "stages: none run"]
    if result.first_bad_stage is None:
        lines += [*result.notes] if result.notes else ["every stage agrees with the uncompiled program"]
        lines.append(_tolerance_line(result))
        return lines
    lines.append(f"first bad stage: {result.first_bad_stage} ({result.kind}): points to {result.stack_layer}")
    if result.error:
        lines.append("error: " + result.error.replace("\n", "\n       "))
    if result.error_source:
        lines.append(f"raised from: {result.error_source}")
    if result.graph:
        lines.append(f"graph: {result.graph} (compile id {result.compile_id or '?'}, {result.graph_size} ops)")
    op = result.op
    if op is not None:
        where = ", ".join(x for x in (f"layer {op.layer} ({op.module_type})" if op.layer else "", op.source) if x)
        lines.append(f"op: {op.target} (node {op.node})" + (f" at {where}" if where else ""))
        if op.code:
            lines.append(f"    {op.code}")
        if op.max_abs_err is not None:
            lines.append(f"    {op.where} differs: max abs error {op.max_abs_err:.3g}, max rel error "
                         f"{op.max_rel_err:.3g} (tolerance rtol {op.rtol:g}, atol {op.atol:g})")  # fmt: skip
    elif result.graph:
        lines.append("op: not isolated (the failure needs several ops of the graph together)")
    if result.inductor_subsystem:
        lines.append(f"inductor: switching off {result.inductor_subsystem} makes it agree")
    if result.repro:
        lines.append(f"repro: {result.repro}/repro.py ({result.graph_size} ops -> {result.repro_size}); "
                     f"`python {result.repro}/repro.py` exits 1 while the bug is there")  # fmt: skip
    lines.append(f"next: {result.next_step}")
    lines += result.notes
    lines.append(f"{result.compiles} compilations, {result.seconds:.1f} s. " + _tolerance_line(result))
    return lines


def _tolerance_line(result: BisectResult) -> str:
    return "tolerances: " + ", ".join(f"{d} rtol {r:g} atol {a:g}" for d, (r, a) in result.tolerances.items())
