"""Stdlib round trip: run CPython's own test suites against decompiled-and-recompiled modules.

For each standard-library module in MODULES, every function the module defines (module-level
functions, methods, static/class methods, properties, `__wrapped__` originals; nested functions,
lambdas and comprehensions come along inside their parent) is decompiled from its code object,
the source is compiled again, and the new code object replaces the old one in place
(`func.__code__ = new`, so every reference sees it; free variables and the `__class__` cell are
kept by compiling the source inside a wrapper that reproduces them in the same order).  Modules
imported again later (`test.support.import_fresh_module`, as the json/heapq/operator suites do for
their pure-Python variants) are swapped as they are imported.  Then `test.test_<module>` runs under
unittest in a fresh subprocess, once with the swap and once without, and the two are compared.

Usage (any CPython 3.10-3.13 that ships the `test` package; no third-party packages; the workers
get this checkout's `src` on PYTHONPATH, so no install is needed):

    python tests/decompiler/stdlib_roundtrip.py [--modules a,b] [--json out.json] [--jobs N]
                                         [--timeout S] [--verbose] [--keep-sources DIR]

Each function is decompiled from its code object (`decompile(func.__code__)`): its defaults stay
on the function.  The whole list takes about 2 minutes per Python on 2 cores (`--jobs` defaults
to the core count, at least 2 and at most 4).  Resource-gated tests ('cpu', 'network', ...) are
off, as in `python -m test`.

Prints one row per module: functions found, decompiled, refused (DecompileError), swap failed (the
source compiled to a code object that cannot replace the original: different free variables,
arguments or generator/coroutine flags), and the suite's result without and with the swap, then
the refusal and swap-failure reasons grouped.  `--modules` takes names from MODULES; `--json`
writes everything, per module, including each refused function and each test that got worse.

Exit status: 0 when every function decompiled and was swapped and no suite is worse with the
swap (a test failing or erroring that passed without it, fewer tests run, a crash or a timeout;
tests in HARNESS_ARTIFACTS, which observe the harness itself, are reported but not counted);
1 otherwise (`--max-refused N` tolerates up to N refusals in all, never a worse suite); 2 for a
usage error.  `--verbose` prints each refused function and failing test;
`--keep-sources DIR` keeps the decompiled source of every swapped function (tracebacks point there).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# name shown -> (modules whose functions are swapped, unittest modules that test them, first Python)
MODULES: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[int, int]]] = {
    "abc": (("_py_abc",), ("test.test_abc",), (3, 10)),
    "argparse": (("argparse",), ("test.test_argparse",), (3, 10)),
    "ast": (("ast",), ("test.test_ast",), (3, 10)),
    "base64": (("base64",), ("test.test_base64",), (3, 10)),
    "bisect": (("bisect",), ("test.test_bisect",), (3, 10)),
    "calendar": (("calendar",), ("test.test_calendar",), (3, 10)),
    "cmd": (("cmd",), ("test.test_cmd",), (3, 10)),
    "collections": (("collections",), ("test.test_collections",), (3, 10)),
    "colorsys": (("colorsys",), ("test.test_colorsys",), (3, 10)),
    "configparser": (("configparser",), ("test.test_configparser",), (3, 10)),
    "contextlib": (("contextlib",), ("test.test_contextlib", "test.test_contextlib_async"), (3, 10)),
    "copy": (("copy",), ("test.test_copy",), (3, 10)),
    "csv": (("csv",), ("test.test_csv",), (3, 10)),
    "dataclasses": (("dataclasses",), ("test.test_dataclasses",), (3, 10)),
    "decimal": (("_pydecimal",), ("test.test_decimal",), (3, 10)),
    "difflib": (("difflib",), ("test.test_difflib",), (3, 10)),
    "email": (tuple("email." + m for m in (
        "_header_value_parser", "_parseaddr", "_policybase", "base64mime", "charset", "contentmanager", "encoders",
        "feedparser", "generator", "header", "headerregistry", "iterators", "message", "parser", "policy",
        "quoprimime", "utils")), ("test.test_email",), (3, 10)),
    "enum": (("enum",), ("test.test_enum",), (3, 10)),
    "filecmp": (("filecmp",), ("test.test_filecmp",), (3, 10)),
    "fileinput": (("fileinput",), ("test.test_fileinput",), (3, 10)),
    "fnmatch": (("fnmatch",), ("test.test_fnmatch",), (3, 10)),
    "fractions": (("fractions",), ("test.test_fractions",), (3, 10)),
    "functools": (("functools",), ("test.test_functools",), (3, 10)),
    "getopt": (("getopt",), ("test.test_getopt",), (3, 10)),
    "gettext": (("gettext",), ("test.test_gettext",), (3, 10)),
    "glob": (("glob",), ("test.test_glob",), (3, 10)),
    "graphlib": (("graphlib",), ("test.test_graphlib",), (3, 10)),
    "gzip": (("gzip",), ("test.test_gzip",), (3, 10)),
    "heapq": (("heapq",), ("test.test_heapq",), (3, 10)),
    "html": (("html",), ("test.test_html",), (3, 10)),
    "html.parser": (("html.parser",), ("test.test_htmlparser",), (3, 10)),
    "http.cookiejar": (("http.cookiejar",), ("test.test_http_cookiejar",), (3, 10)),
    "http.cookies": (("http.cookies",), ("test.test_http_cookies",), (3, 10)),
    "inspect": (("inspect",), ("test.test_inspect",), (3, 10)),
    "ipaddress": (("ipaddress",), ("test.test_ipaddress",), (3, 10)),
    "json": (("json", "json.decoder", "json.encoder", "json.scanner"), ("test.test_json",), (3, 10)),
    "linecache": (("linecache",), ("test.test_linecache",), (3, 10)),
    "mimetypes": (("mimetypes",), ("test.test_mimetypes",), (3, 10)),
    "netrc": (("netrc",), ("test.test_netrc",), (3, 10)),
    "ntpath": (("ntpath",), ("test.test_ntpath",), (3, 10)),
    "operator": (("operator",), ("test.test_operator",), (3, 10)),
    "optparse": (("optparse",), ("test.test_optparse",), (3, 10)),
    "pickletools": (("pickletools",), ("test.test_pickletools",), (3, 10)),
    "plistlib": (("plistlib",), ("test.test_plistlib",), (3, 10)),
    "posixpath": (("posixpath", "genericpath"), ("test.test_posixpath",), (3, 10)),
    "pprint": (("pprint",), ("test.test_pprint",), (3, 10)),
    "pstats": (("pstats",), ("test.test_pstats",), (3, 10)),
    "quopri": (("quopri",), ("test.test_quopri",), (3, 10)),
    "random": (("random",), ("test.test_random",), (3, 10)),
    "reprlib": (("reprlib",), ("test.test_reprlib",), (3, 10)),
    "sched": (("sched",), ("test.test_sched",), (3, 10)),
    "shelve": (("shelve",), ("test.test_shelve",), (3, 10)),
    "shlex": (("shlex",), ("test.test_shlex",), (3, 10)),
    "shutil": (("shutil",), ("test.test_shutil",), (3, 10)),
    "statistics": (("statistics",), ("test.test_statistics",), (3, 10)),
    "string": (("string",), ("test.test_string",), (3, 10)),
    "tempfile": (("tempfile",), ("test.test_tempfile",), (3, 10)),
    "textwrap": (("textwrap",), ("test.test_textwrap",), (3, 10)),
    "tomllib": (("tomllib", "tomllib._parser", "tomllib._re"), ("test.test_tomllib",), (3, 11)),
    "trace": (("trace",), ("test.test_trace",), (3, 10)),
    "traceback": (("traceback",), ("test.test_traceback",), (3, 10)),
    "typing": (("typing",), ("test.test_typing",), (3, 10)),
    "urllib.parse": (("urllib.parse",), ("test.test_urlparse",), (3, 10)),
    "uuid": (("uuid",), ("test.test_uuid",), (3, 10)),
    "xml.dom.minidom": (("xml.dom.minidom", "xml.dom.minicompat"), ("test.test_minidom",), (3, 10)),
    "xml.etree": (("xml.etree.ElementTree", "xml.etree.ElementPath"), ("test.test_xml_etree",), (3, 10)),
}

# Tests that see the harness itself, not the decompiled code: not counted as worse (but reported).
HARNESS_ARTIFACTS = {
    "test_coverage_ignore (test.test_trace.TestCoverage.test_coverage_ignore)":
        "traces an import, which runs the harness's import hook (swapping.py)",
    # expects Trace.runfunc's caller entry to name trace.py; swapped, its code names the decompiled source
    "test_loop_caller_importing (test.test_trace.TestCallers)":
        "checks the file name of Trace.runfunc's code, which the swap points at its decompiled source",
    "test_loop_caller_importing (test.test_trace.TestCallers.test_loop_caller_importing)":
        "checks the file name of Trace.runfunc's code, which the swap points at its decompiled source",
}

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"
DEFAULT_TIMEOUT_S = 300


# ---- the parent: run workers, compare, print ---------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    names = [n for n, (_m, _t, first) in MODULES.items() if sys.version_info[:2] >= first]
    if args.modules:
        unknown = [n for n in args.modules.split(",") if n not in MODULES]
        if unknown:
            print(f"unknown module(s) {', '.join(unknown)}; known: {', '.join(MODULES)}", file=sys.stderr)
            return 2
        names = [n for n in args.modules.split(",") if n in names]
    started = time.monotonic()
    jobs = [(n, swap) for n in names for swap in (True, False)]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        done = list(pool.map(lambda job: _run_worker(*job, args.timeout, args.keep_sources), jobs))
    results = {n: _compare(n, done[2 * i], done[2 * i + 1]) for i, n in enumerate(names)}
    elapsed = time.monotonic() - started
    _print_table(results, elapsed, args.verbose)
    if args.json:
        Path(args.json).write_text(json.dumps({"python": sys.version.split()[0], "seconds": round(elapsed, 1),
                                               "modules": results}, indent=1, sort_keys=True))
    return _exit_status(results, args.max_refused)


def _exit_status(results: dict, max_refused: int | None) -> int:
    """0 when all is well; with --max-refused, refusals up to that many in all are tolerated (a
    refusal shows dis output in a report, never wrong code), but a suite that got worse never is."""
    if max_refused is None:
        return 0 if all(r["ok"] for r in results.values()) else 1
    refused = sum(r["swapped"].get("stats", {}).get("refused", 0) for r in results.values())
    miscompiled = any(r["problems"] or r["worse"] or r["swapped"].get("stats", {}).get("swap_failed")
                      for r in results.values())
    if refused > max_refused:
        print(f"{refused} functions refused, more than --max-refused {max_refused}", file=sys.stderr)
    return 1 if miscompiled or refused > max_refused else 0


def _parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modules", help="comma-separated names from MODULES (default: all)")
    parser.add_argument("--json", help="write the full results to this file")
    parser.add_argument("--jobs", type=int, default=max(2, min(4, os.cpu_count() or 2)))
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per suite run")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--max-refused", type=int, metavar="N",
                        help="exit 0 with up to N refused functions in all (suites must still be no worse)")
    parser.add_argument("--keep-sources", metavar="DIR", help="keep the decompiled sources, one file per function")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--no-swap", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _run_worker(name: str, swap: bool, timeout: float, keep_sources: str | None = None) -> dict:
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=os.pathsep.join(
        [str(SRC)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    with tempfile.TemporaryDirectory(prefix="stdlib_roundtrip_") as tmp:
        result_path = Path(tmp) / "result.json"
        sources = Path(keep_sources) / name if keep_sources and swap else Path(tmp) / "sources"
        sources.mkdir(parents=True, exist_ok=True)
        env["STDLIB_ROUNDTRIP_SOURCES"] = str(sources)
        # suites such as test_filecmp use fixed names in the temp dir: the swapped and plain runs of a
        # module run at once, so each gets its own
        (Path(tmp) / "tmp").mkdir()
        env["TMPDIR"] = str(Path(tmp) / "tmp")
        command = [sys.executable, str(Path(__file__).resolve()), "--worker", name, "--result", str(result_path)]
        if not swap:
            command.append("--no-swap")
        started = time.monotonic()
        try:
            proc = subprocess.run(command, cwd=tmp, env=env, capture_output=True, check=False, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"status": "timeout", "detail": f"no result after {timeout:.0f} s"}
        seconds = round(time.monotonic() - started, 1)
        if not result_path.exists():
            tail = (proc.stdout + proc.stderr)[-2000:]
            return {"status": "crashed", "detail": f"exit status {proc.returncode}: {tail}", "seconds": seconds}
        result = json.loads(result_path.read_text())
        result["seconds"] = seconds
        return result


def _compare(name: str, swapped: dict, plain: dict) -> dict:
    result = {"swapped": swapped, "plain": plain, "worse": [], "problems": []}
    if swapped.get("status") != "ran":
        result["problems"].append(f"with swap: {swapped.get('status')}: {swapped.get('detail', '')[-1500:]}")
    if plain.get("status") != "ran":
        result["problems"].append(f"without swap: {plain.get('status')}: {plain.get('detail', '')[-1500:]}")
    if not result["problems"]:
        before, after = set(plain["tests"]["bad"]), set(swapped["tests"]["bad"])
        result["worse"] = sorted(after - before - set(HARNESS_ARTIFACTS))
        result["artifacts"] = sorted((after - before) & set(HARNESS_ARTIFACTS))
        if swapped["tests"]["run"] < plain["tests"]["run"]:
            result["problems"].append(f"fewer tests ran with the swap ({swapped['tests']['run']} < {plain['tests']['run']})")
    stats = swapped.get("stats", {})
    result["ok"] = not (result["problems"] or result["worse"] or stats.get("refused") or stats.get("swap_failed"))
    return result


def _suite_text(run: dict) -> str:
    if run.get("status") != "ran":
        return run.get("status", "?")
    tests = run["tests"]
    bad = len(tests["bad"])
    return f"{tests['run']} run" + (f", {bad} bad" if bad else " ok")


def _print_table(results: dict, elapsed: float, verbose: bool) -> None:
    header = ("module", "functions", "decompiled", "refused", "swap failed", "without swap", "with swap", "verdict",
              "seconds")
    rows = []
    totals = [0, 0, 0, 0]
    for name, r in results.items():
        stats = r["swapped"].get("stats", {})
        numbers = [stats.get("functions", 0), stats.get("decompiled", 0), stats.get("refused", 0),
                   stats.get("swap_failed", 0)]
        totals = [a + b for a, b in zip(totals, numbers, strict=True)]
        verdict = "ok" if r["ok"] else ("WORSE" if r["worse"] or r["problems"] else "refusals")
        seconds = f"{r['plain'].get('seconds', 0):.0f}+{r['swapped'].get('seconds', 0):.0f}"
        rows.append((name, *map(str, numbers), _suite_text(r["plain"]), _suite_text(r["swapped"]), verdict, seconds))
    green = sum(1 for r in results.values() if not r["worse"] and not r["problems"])
    rows.append(("TOTAL", *map(str, totals), "", f"{green}/{len(results)} not worse", "", ""))
    widths = [max(len(str(row[i])) for row in [*rows, header]) for i in range(len(header))]
    line = "  ".join("{:<%d}" % w for w in widths)
    print(f"stdlib round trip, python {sys.version.split()[0]}, {elapsed:.0f} s")
    print(line.format(*header))
    print(line.format(*("-" * w for w in widths)))
    for row in rows:
        print(line.format(*row))
    _print_reasons(results, verbose)


def _print_reasons(results: dict, verbose: bool) -> None:
    grouped: dict[str, list[str]] = {}
    for name, r in results.items():
        stats = r["swapped"].get("stats", {})
        for kind in ("refusals", "swap_failures"):
            for qualname, reason in stats.get(kind, {}).items():
                grouped.setdefault(f"{kind[:-1].replace('_', ' ')}: {_reason_key(reason)}", []).append(f"{name}:{qualname}")
    if grouped:
        print("\nreasons (count, reason, examples):")
    for reason, where in sorted(grouped.items(), key=lambda kv: -len(kv[1])):
        shown = where if verbose else where[:3]
        print(f"  {len(where):4d}  {reason}\n        {', '.join(shown)}{' ...' if len(shown) < len(where) else ''}")
    for name, r in results.items():
        for test_id in r.get("artifacts", ()):
            print(f"\n{name}: {test_id} failed with the swap; not counted: {HARNESS_ARTIFACTS[test_id]}")
        for problem in r["problems"]:
            print(f"\n{name}: {problem}")
        if r["worse"]:
            shown = r["worse"] if verbose else r["worse"][:5]
            print(f"\n{name}: {len(r['worse'])} test(s) worse with the swap: {', '.join(shown)}")
            if verbose:
                for test_id in shown:
                    print(r["swapped"]["tests"]["details"].get(test_id, "")[-1500:])


def _reason_key(reason: str) -> str:
    return re.sub(r"\d+", "N", reason)[:120]


# ---- the worker: swap, run the suite, write a JSON result -------------------------------------
def worker(name: str, swap: bool, result_path: str) -> None:
    modules, test_modules, _first = MODULES[name]
    swapper = None
    if swap:
        from swapping import Swapper  # only the worker needs the decompiler

        swapper = Swapper(modules)
        swapper.install()
    import importlib

    for module in modules:
        importlib.import_module(module)
    tests = _run_suite(test_modules)
    result = {"status": "ran", "tests": tests}
    if swapper is not None:
        result["stats"] = swapper.stats()
    Path(result_path).write_text(json.dumps(result))


def _run_suite(test_modules: tuple[str, ...]) -> dict:
    import io
    import unittest

    import test.support

    test.support.use_resources = []  # as `python -m test` does by default: no 'cpu', 'network'... tests
    suite = unittest.defaultTestLoader.loadTestsFromNames(test_modules)
    runner = unittest.TextTestRunner(stream=io.StringIO(), verbosity=0)
    outcome = runner.run(suite)
    bad = {re.sub(r" at 0x[0-9a-f]+", "", str(test)): text for test, text in outcome.failures + outcome.errors + [
        (t, "unexpected success") for t in outcome.unexpectedSuccesses]}
    return {"run": outcome.testsRun, "skipped": len(outcome.skipped), "bad": sorted(bad),
            "details": {k: v[-3000:] for k, v in bad.items()}}


if __name__ == "__main__":
    cli = _parse(sys.argv[1:])
    if cli.worker:
        worker(cli.worker, not cli.no_swap, cli.result)
        sys.exit(0)
    sys.exit(main())
