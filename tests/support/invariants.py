"""Invariants that every `dynascope run` result must hold, whatever the program (issue 25, item 2).

Given a run's output directory and the run's piped terminal output, `collect` gathers every view of
the same run (`dynascope report --json`, `--csv`, the terminal report, report.html, explanation.json,
`dynascope explain DIR` and the trace files) and `check` returns one readable line per broken
invariant, naming the invariant, the output and the numbers:

- compile <= span (headline, JSON, per process);
- step parts (data, forward, eval, backward, optimizer, I/O, compile, other) add to each step's
  total, and the parts' shares to 100%;
- per-compile rows add to the compile total (JSON/CSV `compile_vs_run`, `cache_entries`,
  `compiled_functions`, explanation.json's `compile_times`, explain's table, the HTML's table),
  every compile row has a compile id, and a recompile row costs what its compiles cost;
- one compile total in the headline, JSON, CSV, HTML and explain; a view that leaves something out
  must say so on the same line with the amount (`X s ... (plus Y s of ...)` adding up to the total);
- every kernel / op event lies inside its graph call (the trace, read independently of dynascope);
- shares add to 100% (JSON and CSV tables that partition a total, the terminal's "time in steps"
  and phase lines, the HTML's legends);
- every time cell in every terminal table has a whole unit (no "18.5 m", no bare "597");
- no row listed twice (terminal tables and numbered lists as printed, the JSON tables by their keys);
- no line of a run's outputs recommends running `dynascope explain` (the run already did);
- piped terminal output keeps to a log file's width (100 columns) for dynascope's own lines, and a
  wrapped line never cuts a figure from its unit;
- time charged to the right part and line: a checkpoint saved inside a step is that step's I/O;
  recompiles and graph breaks are charged to the program's line, not to torch's or a library's; the
  program's own files rank above every other group of the file table.

Each failure starts with its invariant in brackets: [compile<=span], [step parts], [compile rows],
[compile ids], [compile total], [span], [inside graph call], [shares], [units], [duplicate], [advice],
[width], [I/O part], [user frame], [file order], [tables] (a table the checker cannot read), [outputs].

Run it by hand on any run directory (e.g. the demo's):
    PYTHONPATH=tests python -m support.invariants DIR [--stdout FILE_WITH_THE_RUN_STDOUT]
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from support.tracecheck import load, readable_prefix, trace_files

# ----------------------------------------------------------------------------- durations in text

_UNIT_S = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0}
_NUMBER = r"-?\d+(?:[.,]\d+)*(?:e[+-]?\d+)?"
# "840 µs", "12.3 ms", "4.56 s", "2 min 5 s", "1 h 2 min"
DURATION = re.compile(
    rf"(?<![\w.])(?P<a>{_NUMBER}) ?(?P<ua>h|min|s|ms|µs|us|ns)(?:\s(?P<b>\d+) ?(?P<ub>min|s))?(?![\w/])"
)
VALID_UNITS = set(_UNIT_S) | {"B", "kB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "%", "×", "x"}


@dataclass(frozen=True)
class Duration:
    seconds: float
    tolerance: float  # half the last printed digit: what rounding to this text can hide
    text: str


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _half_digit(text: str) -> float:
    text = text.replace(",", "")
    if "e" in text.lower():
        mantissa, exp = text.lower().split("e")
        return _half_digit(mantissa) * 10 ** int(exp)
    decimals = len(text.split(".")[1]) if "." in text else 0
    return 0.5 * 10**-decimals


def durations(text: str) -> list[Duration]:
    found = []
    for m in DURATION.finditer(text):
        seconds = _number(m["a"]) * _UNIT_S[m["ua"]]
        tolerance = _half_digit(m["a"]) * _UNIT_S[m["ua"]]
        if m["b"] is not None:
            seconds += _number(m["b"]) * _UNIT_S[m["ub"]]
            tolerance = 0.5 * _UNIT_S[m["ub"]]
        found.append(Duration(seconds, tolerance, m.group(0)))
    return found


def parse_duration(cell: str) -> Duration | None:
    """A cell that is exactly one duration, else None."""
    cell = cell.strip()
    m = DURATION.fullmatch(cell)
    return durations(cell)[0] if m else None


def close(a: float, b: float, tolerance: float) -> bool:
    return abs(a - b) <= tolerance


# ----------------------------------------------------------------------------- gathering the outputs


@dataclass
class Outputs:
    """Every view of one run. Any of them may be None (not produced), and is then not checked."""

    out_dir: Path
    run_stdout: str | None = None  # `dynascope run`'s stdout, piped (the program's own lines first)
    report_json: dict | None = None  # `dynascope report --json DIR`
    csv_tables: dict[str, list[dict]] | None = None  # `dynascope report --csv CSVDIR`: file stem -> rows
    report_text: str | None = None  # `dynascope report DIR`, piped
    html: str | None = None  # report.html
    explanation: dict | None = None  # explanation.json
    explain_text: str | None = None  # `dynascope explain DIR`, piped
    traces: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # a view that could not be produced


def _cli(*args: str, cwd: str) -> subprocess.CompletedProcess:
    """`dynascope ARGS` as a user runs it with its output piped, in this process: the commands that read a
    run's outputs are pure, and this saves an interpreter start per view."""
    from support.cli import dynascope_here

    return dynascope_here(*args, cwd=cwd)


def _csv_value(text: str):
    if text == "":
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def collect(out_dir: str | os.PathLike, run_stdout: str | None = None) -> Outputs:
    """Run `dynascope report` (--json, --csv, terminal) and `dynascope explain` on a run's directory."""
    out = Path(out_dir)
    outputs = Outputs(out_dir=out, run_stdout=run_stdout, traces=trace_files(str(out)))
    cwd = str(out.parent)
    csv_dir = out.parent / f"{out.name}-csv"
    result = _cli("report", "--json", "--csv", str(csv_dir), str(out), cwd=cwd)
    if result.returncode == 0:
        outputs.report_json = json.loads(result.stdout)
        outputs.csv_tables = {}
        for path in sorted(csv_dir.glob("*.csv")):
            with open(path, newline="") as handle:
                outputs.csv_tables[path.stem] = [{k: _csv_value(v) for k, v in row.items()} for row in csv.DictReader(handle)]
    else:
        outputs.errors.append(f"dynascope report --json --csv failed ({result.returncode}): {result.stderr[-2000:]}")
    result = _cli("report", str(out), cwd=cwd)
    if result.returncode == 0:
        outputs.report_text = result.stdout
    else:
        outputs.errors.append(f"dynascope report failed ({result.returncode}): {result.stderr[-2000:]}")
    if (out / "report.html").exists():
        outputs.html = (out / "report.html").read_text()
    if (out / "explanation.json").exists():
        outputs.explanation = json.loads((out / "explanation.json").read_text())
        result = _cli("explain", str(out), cwd=cwd)
        if result.returncode == 0:
            outputs.explain_text = result.stdout
        else:
            outputs.errors.append(f"dynascope explain DIR failed ({result.returncode}): {result.stderr[-2000:]}")
    return outputs


# ----------------------------------------------------------------------------- terminal tables

RULE = "─"


@dataclass
class Table:
    source: str  # which output
    title: str
    header: str
    columns: list[tuple[str, int, int]]  # (header text, start, end)
    rows: list[list[str]]  # each row: its first line, then continuation lines


def _cells(line: str) -> list[tuple[str, int, int]]:
    """Cells of a table line: runs of text separated by two or more spaces, with their columns."""
    return [(m.group(0), m.start(), m.end()) for m in re.finditer(r"\S+(?: \S+)*", line)]


def terminal_tables(text: str, source: str) -> list[Table]:
    """The tables of dynascope's terminal output: a header line over a rule of '─', rows until a blank line."""
    lines = text.split("\n")
    tables = []
    for i, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or set(stripped) != {RULE} or i == 0:
            continue
        header = lines[i - 1]
        if not header.strip() or set(header.strip()) == {RULE}:
            continue
        above = []  # the title: the lines above the header, up to a blank line (a long title wraps)
        for j in range(i - 2, max(i - 5, -1), -1):
            if lines[j].strip() and not lines[j].startswith("("):
                above.insert(0, lines[j].strip())
            elif above:
                break
        title = " ".join(above)
        rows: list[list[str]] = []
        for row_line in lines[i + 1 :]:
            if not row_line.strip() or set(row_line.strip()) == {RULE}:
                break
            if rows and row_line[: len(row_line) - len(row_line.lstrip())] and not row_line[:3].strip():
                # a continuation line: nothing in the first column
                first_col_end = _cells(header)[0][2] if _cells(header) else 0
                if not row_line[: max(first_col_end, 1)].strip():
                    rows[-1].append(row_line)
                    continue
            rows.append([row_line])
        tables.append(Table(source, title, header, _cells(header), rows))
    return tables


def _column_of(cell: tuple[str, int, int], columns: list[tuple[str, int, int]]) -> int | None:
    """The header a cell sits under: the one it overlaps most, else the nearest."""
    _, start, end = cell
    best, best_overlap = None, 0
    for k, (_, hs, he) in enumerate(columns):
        overlap = min(end, he) - max(start, hs)
        if overlap > best_overlap:
            best, best_overlap = k, overlap
    if best is not None:
        return best
    distances = [min(abs(start - he), abs(end - hs)) for _, hs, he in columns]
    return distances.index(min(distances)) if distances else None


TIME_HEADER = re.compile(
    r"^(total|mean|each|time|compile time|median|p\d\d|max|min|wall|per call|per step|per hit|cost|overhead|self|run|"
    r"op time|in compile|eager|graphs|breaks|saved|waited|data|forward|backward|optimizer|I/O|other|eval)$",
    re.IGNORECASE,
)
CUT_UNIT = re.compile(r"^-?\d[\d.,]*\s?(m|µ|u|n|mi|mi…|m…|µ…|n…|\S*…)$")
EMPTY_CELL = {"", "-", "–", "—", "(none)", "n/a"}


def _row_cells(table: Table, row: list[str]) -> dict[int, str]:
    by_col: dict[int, list[str]] = defaultdict(list)
    for cell in _cells(row[0]):
        col = _column_of(cell, table.columns)
        if col is not None:
            by_col[col].append(cell[0])
    return {k: " ".join(v) for k, v in by_col.items()}


def check_table_units(table: Table) -> list[str]:
    failures = []
    cells_by_col: dict[int, list[str]] = defaultdict(list)
    parsed = [_row_cells(table, row) for row in table.rows]
    for cells in parsed:
        for k, v in cells.items():
            cells_by_col[k].append(v)
    for k, (name, _, _) in enumerate(table.columns):
        values = [v for v in cells_by_col.get(k, []) if v not in EMPTY_CELL]
        timed = sum(parse_duration(v) is not None for v in values)
        is_time = (bool(TIME_HEADER.match(name)) and timed > 0) or (values and timed * 2 >= len(values))
        for v in values:
            if CUT_UNIT.match(v):
                failures.append(f"[units] {table.source}, table {table.title!r}, column {name!r}: cell {v!r} has a cut unit")
            elif is_time and parse_duration(v) is None and re.fullmatch(r"-?[\d.,]+(?:\s[\d.,]+)*", v):
                failures.append(f"[units] {table.source}, table {table.title!r}, column {name!r}: time cell {v!r} has no unit")
    for k, (name, _, _) in enumerate(table.columns):
        if TIME_HEADER.match(name) and k not in cells_by_col and table.rows:
            pass  # an empty column: nothing to check
    return failures


_VALUE_CELL = re.compile(r"^(?:[<>]?-?[\d.,]+(?:\s?(?:%|×|x|[kMGT]?i?B|ns|µs|us|ms|s|min|h|m|µ))*|[+-][\d.,]+.*|–|-|—)$")


STEP_PART_HEADERS = ("data", "forward", "eval", "backward", "optimizer", "I/O", "compile", "comm", "other")


def check_step_table(table: Table) -> list[str]:
    """A terminal step table: each step's parts add to its wall time (within the printed rounding)."""
    names = [name for name, _, _ in table.columns]
    if "wall" not in names or "step" not in names[:2]:
        return []
    failures = []
    for row in table.rows:
        cells = _row_cells(table, row)
        if not re.fullmatch(r"\d+", cells.get(names.index("step"), "")):
            continue
        wall = parse_duration(cells.get(names.index("wall"), ""))
        parts = [parse_duration(cells.get(k, "")) for k, name in enumerate(names) if name in STEP_PART_HEADERS]
        if wall is None or not parts or any(p is None for p in parts):
            continue
        added = sum(p.seconds for p in parts if p)
        tolerance = wall.tolerance + sum(p.tolerance for p in parts if p)
        if not close(added, wall.seconds, tolerance):
            shown = [n for n in names if n in STEP_PART_HEADERS]
            failures.append(
                f"[step parts] {table.source}, table {table.title!r}: step {cells[names.index('step')]}'s parts "
                f"({', '.join(shown)}) add to {added:.6g} s, its wall time is {wall.text}"
            )
    return failures


KEY_HEADER = re.compile(r"^(pid|step|epoch|rank|line|id|compile id|#|process|tid|thread)$", re.IGNORECASE)


def check_table_duplicates(table: Table) -> list[str]:
    """Two rows whose every text cell (names, ids, lines, reasons) reads the same, as printed."""
    seen: Counter = Counter()
    for row in table.rows:
        cells = _row_cells(table, row)
        identity = tuple(
            v
            for k, v in sorted(cells.items())
            if k == 0 or (not _VALUE_CELL.match(v) and parse_duration(v) is None) or KEY_HEADER.match(table.columns[k][0])
        )
        identity += tuple(line.strip() for line in row[1:])
        if identity:
            seen[identity] += 1
    return [
        f"[duplicate] {table.source}, table {table.title!r}: a row reads the same {n} times: {' | '.join(identity)[:160]}"
        + ("  (its cells are cut with '…': they may differ beyond what is printed)" if any("…" in c for c in identity) else "")
        for identity, n in seen.items()
        if n > 1
    ]


# ----------------------------------------------------------------------------- the checks


def _dynascope_lines(stdout: str) -> list[str]:
    """The lines dynascope printed after the program's own output (from its `files ... · events` line)."""
    lines = stdout.split("\n")
    for i, line in enumerate(lines):
        if re.match(r"^files [\d,]+\s+·\s+events", line):
            return lines[i:]
    return []


def _headline(lines: list[str]) -> dict:
    """span, compile and phase figures from the terminal headline."""
    facts: dict = {}
    for line in lines[:4]:
        m = re.search(r"span (\S+ (?:min \S+ )?\S+)", line)
        if m and (d := durations(m.group(1))):
            facts["span"] = d[0]
        m = re.match(r"^compile (.+?) \(([\d.<]+)%\)", line)
        if m and (d := durations(m.group(1))):
            facts["compile"] = d[0]
            facts["compile_line"] = line
        if "|" in line and re.search(r"\((?:<)?[\d.]+%\)", line.split("|", 1)[1]):
            phases = line.split("|", 1)[1]
            following = lines[lines.index(line) + 1] if lines.index(line) + 1 < len(lines) else ""
            if following.strip() and not re.match(r"^(Steps|I/O|files|\s)", following):
                phases += following  # a headline wrapped at the terminal's width
            facts["phase_line"] = phases
    return facts


def _percentages(text: str) -> list[tuple[float, float]]:
    """(value, rounding tolerance) of every 'N%' / '<0.1%' in a line."""
    found = []
    for m in re.finditer(r"(<)?(\d+(?:\.\d+)?)%", text):
        if m.group(1):
            found.append((0.05, 0.05))
        else:
            found.append((float(m.group(2)), _half_digit(m.group(2))))
    return found


def check_percent_line(text: str, where: str) -> list[str]:
    shares = _percentages(text)
    if len(shares) < 2:
        return []
    total = sum(v for v, _ in shares)
    tolerance = sum(t for _, t in shares) + 1e-9
    if not close(total, 100.0, tolerance):
        return [f"[shares] {where}: shares add to {total:.2f}%, not 100% (rounding allows ±{tolerance:.2f}): {text.strip()[:160]}"]
    return []


def _stated_total_ok(line: str, total: Duration, expected_s: float, expected_tol: float) -> bool:
    """A view's total agrees, or the same line states the difference (another duration adding up to it)."""
    tol = total.tolerance + expected_tol
    if close(total.seconds, expected_s, tol):
        return True
    stated = re.compile(r"(plus|not counting|without|excluding|leaves out|left out|not in|besides|outside|apart from)\b[^;)]{0,60}$")
    return any(
        close(total.seconds + other.seconds, expected_s, tol + other.tolerance) and stated.search(line[: line.find(other.text)])
        for other in durations(line)
        if other.text != total.text
    )


STEP_PARTS = ("data_us", "forward_us", "eval_us", "backward_us", "optimizer_us", "io_us", "compile_us", "comm_us",
              "other_us")
SHARE_TABLES = ("by_op", "by_kernel", "by_layer", "by_phase", "by_file", "compile_vs_run")


def check_json_like(summary: dict, source: str, top: int | None, explained: bool = True) -> list[str]:
    """The invariants that the JSON and the CSV tables (the same summary) must hold. `explained`: the run
    wrote explanation.json (without it, `--no-explain`, a recompile's user line is not known: the trace
    holds the recompiled function, not the stack that called it, and its rows name that function)."""
    failures = []
    meta = summary.get("meta") or {}
    span, compile_us = meta.get("span_us"), meta.get("compile_us")
    # a job's compile adds every rank's: each rank's fits the span (docs/ranks.md)
    n_ranks = max(1, len(summary.get("by_rank") or []))
    if span is not None and compile_us is not None and compile_us > span * n_ranks:
        failures.append(f"[compile<=span] {source}: compile {compile_us / 1e6:.3f} s > span {span / 1e6:.3f} s" + (f" x {n_ranks} ranks" if n_ranks > 1 else ""))
    for r in summary.get("by_rank") or []:
        if span is not None and (r.get("compile_us") or 0) > span:
            failures.append(f"[compile<=span] {source} by_rank rank {r.get('rank')}: compile {r['compile_us'] / 1e6:.3f} s > span {span / 1e6:.3f} s")
    for proc in summary.get("by_process") or []:
        if span is not None and (proc.get("compile_us") or 0) > span:
            failures.append(f"[compile<=span] {source} by_process pid {proc.get('pid')}: compile {proc['compile_us'] / 1e6:.3f} s > span {span / 1e6:.3f} s")

    # step parts add to the step
    for row in summary.get("by_step") or []:
        parts = [row.get(p) or 0 for p in STEP_PARTS if p in row]
        total = row.get("total_us")
        if total is None or not parts:
            continue
        if abs(sum(parts) - total) > len(parts):  # whole microseconds each
            named = ", ".join(f"{p[:-3]} {row.get(p) or 0}" for p in STEP_PARTS if p in row)
            failures.append(f"[step parts] {source} by_step step {row.get('step')} (epoch {row.get('epoch')}): parts add to {sum(parts)} µs, total {total} µs ({named})")
        for p in STEP_PARTS:
            if (row.get(p) or 0) < 0:
                failures.append(f"[step parts] {source} by_step step {row.get('step')}: {p} is negative ({row[p]})")
    stats = summary.get("step_stats") or []
    if stats:
        total_row = next((r for r in stats if r.get("part") == "total"), None)
        part_rows = [r for r in stats if r.get("part") != "total"]
        share_sum = sum(r.get("share") or 0 for r in part_rows)
        if part_rows and not close(share_sum, 1.0, 0.002):
            failures.append(f"[shares] {source} step_stats: the parts' shares add to {share_sum * 100:.2f}%")
        if total_row is not None:
            parts_total = sum(r.get("total_us") or 0 for r in part_rows)
            if abs(parts_total - (total_row.get("total_us") or 0)) > len(part_rows) * max(1, len(summary.get("by_step") or [])):
                failures.append(f"[step parts] {source} step_stats: parts add to {parts_total} µs, the steps' total is {total_row.get('total_us')} µs")

    # per-compile rows add to the total; every compile has an id
    rows = [r for r in summary.get("compile_vs_run") or [] if r.get("kind") == "compile"]
    for r in rows:
        if r.get("compile_id") in (None, "", "None"):
            failures.append(f"[compile ids] {source} compile_vs_run: a compile row with no compile id ({(r.get('total_us') or 0) / 1e6:.3f} s)")
    by_id: dict = defaultdict(int)
    for r in rows:
        by_id[r.get("compile_id")] += r.get("total_us") or 0
    if compile_us is not None:
        for table, column in (("compile_vs_run", "total_us"), ("cache_entries", "compile_us"), ("compiled_functions", "compile_us"), ("by_process", "compile_us")):
            table_rows = summary.get(table) or []
            if table == "compile_vs_run":
                table_rows = rows
            if not table_rows:
                continue
            added = sum(r.get(column) or 0 for r in table_rows)
            if abs(added - compile_us) > max(1000, 0.001 * compile_us):
                failures.append(f"[compile rows] {source} {table}: rows add to {added / 1e6:.3f} s of compile, the total is {compile_us / 1e6:.3f} s")
        # many ranks: compile_vs_run adds every rank's compiles, so the steps compared are every rank's
        steps = summary.get("by_rank_step") or summary.get("by_step") or []
        step_compile = sum(r.get("compile_us") or 0 for r in steps)
        if step_compile > compile_us + max(1000, 0.001 * compile_us):
            failures.append(f"[compile total] {source} by_step: steps hold {step_compile / 1e6:.3f} s of compile, more than the total {compile_us / 1e6:.3f} s")
        step_ids = {cid for r in steps for cid in (r.get("compile_ids") or []) if cid}
        if isinstance(next(iter(steps), {}).get("compile_ids"), str):  # CSV: "0/0; 0/1"
            step_ids = {cid.strip() for r in steps for cid in str(r.get("compile_ids") or "").split(";") if cid.strip()}
        if steps and step_ids and by_id:
            expected = sum(by_id.get(cid, 0) for cid in step_ids)
            if abs(step_compile - expected) > max(10_000, 0.01 * expected):
                failures.append(
                    f"[compile total] {source} by_step: steps hold {step_compile / 1e6:.3f} s of compile, "
                    f"their compiles ({', '.join(sorted(step_ids))}) cost {expected / 1e6:.3f} s in compile_vs_run"
                )
    for r in summary.get("recompiles") or []:
        ids = r.get("compile_ids") or []
        if isinstance(ids, str):
            ids = [c.strip() for c in ids.split(";") if c.strip()]
        if ids and all(cid in by_id for cid in ids):
            expected = sum(by_id[cid] for cid in ids)
            if abs((r.get("total_us") or 0) - expected) > max(1000, 0.001 * expected):
                failures.append(
                    f"[compile rows] {source} recompiles {r.get('source')}: charged {(r.get('total_us') or 0) / 1e6:.3f} s, "
                    f"its compiles {', '.join(ids)} cost {expected / 1e6:.3f} s"
                )

    # the program's own files come first in the file table
    groups = [str(r.get("group")) for r in summary.get("by_file") or [] if r.get("group") is not None]
    if "program" in groups:
        last_program = len(groups) - 1 - groups[::-1].index("program")
        before = [g for g in groups[:last_program] if g != "program"]
        if before:
            failures.append(f"[file order] {source} by_file: {len(before)} rows of other groups ({', '.join(sorted(set(before)))}) rank above the program's own files")

    # recompiles and graph breaks are charged to the program's line, not to torch's or a library's
    for table in ("recompiles", "graph_breaks") if explained else ("graph_breaks",):
        for r in summary.get(table) or []:
            where = str(r.get("file") or "")
            library = r"(^|/)(site-packages|dist-packages)/|(^|/)torch/|^(nn|_dynamo|_inductor|utils|optim|autograd)/"
            if re.search(library, where) and "/dynascope/demo/" not in where:  # the demo is the user's script
                failures.append(f"[user frame] {source} {table}: {r.get('source')} is charged to a library file ({where}:{r.get('line')}), not to the program's line")

    # shares add to 100%
    for table in SHARE_TABLES:
        table_rows = summary.get(table) or []
        if not table_rows or "share" not in table_rows[0]:
            continue
        share_sum = sum(r.get("share") or 0 for r in table_rows)
        truncated = top is not None and len(table_rows) >= top and table not in ("compile_vs_run", "by_phase")
        if share_sum > 1.002 or (not truncated and not close(share_sum, 1.0, 0.002)):
            failures.append(f"[shares] {source} {table}: shares add to {share_sum * 100:.2f}% over {len(table_rows)} rows")

    # no row listed twice
    keys = {
        "by_step": ("epoch", "step"),
        "by_kernel": ("name", "compile_id", "graph", "phase", "layer", "kernel_code"),
        "by_op": ("name", "cat"),
        "by_layer": ("layer", "module_type"),
        "by_file": ("fname", "group"),
        "cache_entries": ("compile_id",),
        "compile_vs_run": ("kind", "compile_id"),
        "compiled_functions": ("function", "file", "line"),
        "graph_breaks": ("file", "line", "function"),
        "recompiles": ("file", "line", "reason"),
        "by_graph": ("compile_id", "graph", "phase"),
    }
    for table, key in keys.items():
        counted = Counter(tuple(str(r.get(k)) for k in key) for r in summary.get(table) or [])
        for k, n in counted.items():
            if n > 1:
                failures.append(f"[duplicate] {source} {table}: {n} rows for {dict(zip(key, k, strict=True))}")
    return failures


def check_terminal(text: str, source: str, piped_width: int | None = 100, run_output: bool = False) -> list[str]:
    failures = []
    lines = _dynascope_lines(text) if run_output else text.split("\n")
    body = "\n".join(lines)
    head = _headline(lines)
    m = re.search(r" over (\d+) ranks", head.get("compile_line", ""))
    n_ranks = int(m.group(1)) if m else 1  # a job's headline adds every rank's compile
    if "span" in head and "compile" in head and head["compile"].seconds > n_ranks * head["span"].seconds + head["compile"].tolerance + head["span"].tolerance:
        failures.append(f"[compile<=span] {source} headline: compile {head['compile'].text} > span {head['span'].text}")
    if "phase_line" in head:
        failures += check_percent_line(head["phase_line"], f"{source} headline phases")
    for i, line in enumerate(lines):
        if line.strip().startswith("time in steps:"):
            text = line
            for following in lines[i + 1 :]:  # wrapped at the terminal's width: goes on at column 0
                if not following.strip() or following[0].isspace() or re.match(r"^[A-Z][\w/ ]*:", following):
                    break
                text += " " + following
            failures += check_percent_line(text.split(":", 1)[1], f"{source} 'time in steps'")
        if i + 1 < len(lines) and re.search(r"\d$", line.rstrip()) and re.match(r"^\s*(ns|µs|us|ms|s|min|h|%)\b", lines[i + 1]):
            failures.append(f"[units] {source}: a wrapped line cuts a figure from its unit: {line.strip()[-40:]!r} / {lines[i + 1].strip()[:20]!r}")
    tables = terminal_tables(body, source)
    if run_output and re.search(r"^Top \d+ ", body, re.M) and not tables:
        failures.append(f"[tables] {source}: a 'Top N' table whose header and rule this checker cannot find (its checks would pass unseen)")
    failures += check_numbered_lists(lines, source)
    for table in tables:
        failures += check_table_units(table)
        failures += check_table_duplicates(table)
        failures += check_step_table(table)
    if piped_width:
        for line in lines:
            longest_path = max((len(t) for t in line.split() if "/" in t), default=0)  # a path is as long as it is
            if len(line.rstrip()) - longest_path > piped_width - 10 and len(line.rstrip()) > piped_width:
                failures.append(f"[width] {source}: a {len(line.rstrip())}-column line when piped (at most {piped_width}): {line.strip()[:60]!r}")
                break
    return failures


def check_numbered_lists(lines: list[str], source: str) -> list[str]:
    """A numbered list under a title ('Graph breaks by cost' / '  1. model.py:12'): no place listed twice."""
    failures, title, seen = [], "", Counter()

    def flush() -> None:
        failures.extend(
            f"[duplicate] {source}, list {title!r}: {item} is listed {n} times" for item, n in seen.items() if n > 1
        )

    for line in lines:
        if line and not line[0].isspace():
            flush()
            title, seen = line.strip(), Counter()
        elif m := re.match(r"^\s+\d+\.\s+(\S+)", line):
            seen[m.group(1)] += 1
    flush()
    return failures


def check_no_explain_advice(text: str, source: str) -> list[str]:
    return [
        f"[advice] {source}: a line recommends running `dynascope explain`, which the run already did: {line.strip()[:160]!r}"
        for line in text.split("\n")
        if "dynascope explain" in line
    ]


class _HTMLText(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.cards: dict[str, str] = {}
        self._skip = 0
        self._label: str | None = None
        self._want: str | None = None

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self._skip += 1
        cls = dict(attrs).get("class") or ""
        self._want = cls if cls in ("label", "value") else None
        if tag in ("tr", "div", "p", "li", "h2", "h3", "br", "section", "table"):
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self._skip -= 1
        self._want = None

    def handle_data(self, data):
        if self._skip:
            return
        if self._want == "label":
            self._label = data.strip()
        elif self._want == "value" and self._label:
            self.cards.setdefault(self._label, data.strip())
            self._label = None
        self.parts.append(data)

    def text(self) -> str:
        return re.sub(r"[ \t]+", " ", "".join(self.parts))


def _html_compile_table(html: str) -> list[tuple[str, str]]:
    """(compile id, total) rows of the HTML's compile-against-run table."""
    panel = html.split('id="chart-compile"', 1)
    if len(panel) < 2:
        return []
    section = panel[1].split('<div class="panel"', 1)[0]
    rows = []
    for tr in re.findall(r"<tr>(.*?)</tr>", section, re.S):
        cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", tr, re.S)]
        if len(cells) >= 3 and cells[0] == "compile":
            rows.append((cells[1], cells[2]))
    return rows


def check(outputs: Outputs) -> list[str]:
    failures = [f"[outputs] {e}" for e in outputs.errors]
    summary = outputs.report_json
    top = summary.get("top") if summary else None
    compile_s = span_s = None
    if summary:
        failures += check_json_like(summary, "report --json", top, outputs.explanation is not None)
        meta = summary.get("meta") or {}
        if meta.get("compile_us") is not None:
            compile_s = meta["compile_us"] / 1e6
        if meta.get("span_us") is not None:
            span_s = meta["span_us"] / 1e6
    if outputs.csv_tables is not None:
        tables = dict(outputs.csv_tables)
        if summary:
            tables["meta"] = summary.get("meta")  # the CSV has no meta: its tables must add to the JSON's totals
        failures += check_json_like(tables, "report --csv", top, outputs.explanation is not None)

    exact = 1e-6  # the JSON's total, in whole microseconds

    # terminal outputs
    for text, source, run_output in ((outputs.run_stdout, "run stdout", True), (outputs.report_text, "report (terminal)", False)):
        if text is None:
            continue
        failures += check_terminal(text, source, run_output=run_output)
        if outputs.explanation is not None:  # advice to run explain is right where the run did not (--no-explain)
            failures += check_no_explain_advice("\n".join(_dynascope_lines(text)) if run_output else text, source)
        head = _headline(_dynascope_lines(text) if run_output else text.split("\n"))
        if compile_s and "compile" not in head:
            failures.append(f"[compile total] {source}: no 'compile X (N%)' headline, though the run compiled for {compile_s:.3f} s")
        if compile_s is not None and "compile" in head and not _stated_total_ok(head["compile_line"], head["compile"], compile_s, exact):
            failures.append(f"[compile total] {source} headline says compile {head['compile'].text}, the JSON {compile_s:.3f} s")
        if span_s is not None and "span" in head and not close(head["span"].seconds, span_s, head["span"].tolerance + exact):
            failures.append(f"[span] {source} headline says span {head['span'].text}, the JSON {span_s:.3f} s")

    # HTML
    if outputs.html is not None:
        parser = _HTMLText()
        parser.feed(outputs.html)
        html_text = parser.text()
        if outputs.explanation is not None:
            failures += check_no_explain_advice(html_text, "report.html")
        card = parser.cards.get("compile")
        if card is None and compile_s:
            failures.append(f"[compile total] report.html has no 'compile' figure among its cards (the run compiled for {compile_s:.3f} s)")
        if card is not None and compile_s is not None:
            d = parse_duration(card)
            if d is None or not close(d.seconds, compile_s, d.tolerance + exact):
                failures.append(f"[compile total] report.html's compile card says {card!r}, the JSON {compile_s:.3f} s")
        span_card = parser.cards.get("span")
        d, c = parse_duration(span_card or ""), parse_duration(card or "")
        n_ranks = max(1, len((summary or {}).get("by_rank") or []))  # a job's card adds every rank's compile
        if d and c and c.seconds > n_ranks * d.seconds + c.tolerance + d.tolerance:
            failures.append(f"[compile<=span] report.html: compile {card} > span {span_card}")
        rows = _html_compile_table(outputs.html)
        for cid, _ in rows:
            if cid in ("", "None", "–", "-"):
                failures.append(f"[compile ids] report.html's compile-against-run table has a compile row with id {cid!r}")
        parsed = [parse_duration(t) for _, t in rows]
        if rows and compile_s is not None and all(parsed):
            added = sum(d.seconds for d in parsed if d)
            tol = sum(d.tolerance for d in parsed if d) + exact
            if not close(added, compile_s, tol):
                failures.append(f"[compile rows] report.html's compile rows add to {added:.3f} s, the JSON total is {compile_s:.3f} s")
        m = re.search(r"Compile against run[^\n]*\n(?:\s*\n)*([^\n]*compile [^\n]*%[^\n]*)", html_text)
        if m:
            failures += check_percent_line(m.group(1), "report.html compile-against-run legend")
        m = re.search(r"Where each step goes[^\n]*\n(?:\s*\n)*([^\n]*%[^\n]*)", html_text)
        if m:
            failures += check_percent_line(m.group(1), "report.html 'Where each step goes' legend")

    # explanation.json and `dynascope explain DIR`
    if outputs.explanation is not None:
        times = outputs.explanation.get("compile_times") or []
        ids = [t.get("compile_id") for t in times]
        for cid, n in Counter(ids).items():
            if n > 1:
                failures.append(f"[duplicate] explanation.json compile_times: compile id {cid} listed {n} times")
        added = sum(t.get("total_s") or 0 for t in times)
        if times and compile_s is not None and not close(added, compile_s, 0.001 + 0.001 * compile_s):
            failures.append(f"[compile total] explanation.json's compile_times add to {added:.3f} s, the JSON report's total is {compile_s:.3f} s")
        if summary:
            report_ids = {r.get("compile_id"): (r.get("total_us") or 0) / 1e6 for r in summary.get("compile_vs_run") or [] if r.get("kind") == "compile"}
            for t in times:
                cid, total = t.get("compile_id"), t.get("total_s")
                if cid in report_ids and total is not None and not close(total, report_ids[cid], 0.001 + 0.001 * report_ids[cid]):
                    failures.append(f"[compile rows] compile {cid}: explanation.json {total:.3f} s, the JSON report's compile_vs_run {report_ids[cid]:.3f} s")
    if outputs.explain_text is not None:
        text = outputs.explain_text
        failures += check_terminal(text, "explain DIR", piped_width=None)
        if (outputs.explanation or {}).get("compile_times") and not re.search(r"^Compile times \(", text, re.M):
            failures.append("[compile total] explain DIR prints no 'Compile times (N compiles, X in all ...)' line, though explanation.json has compile times")
        for line in text.split("\n"):
            m = re.match(r"^Compile times \((\d+) compiles?, (.+?) in all", line.strip())
            if not m:
                continue
            total = durations(m.group(2))
            if total and compile_s is not None and not _stated_total_ok(line, total[0], compile_s, exact):
                failures.append(f"[compile total] explain DIR says {m.group(2)} in all, the JSON {compile_s:.3f} s, and its line does not state the difference: {line.strip()[:200]!r}")
            if total:
                failures += _check_explain_rows(text, total[0])
    # memory: the explanation's accounts, the report's tables (JSON, CSV) and `explain DIR` say the same
    if summary:
        failures += check_memory(summary, outputs.explanation, outputs.explain_text, "report --json")
    if outputs.csv_tables is not None and summary:
        failures += check_memory(outputs.csv_tables, outputs.explanation, None, "report --csv")
    # many ranks
    if summary:
        failures += check_ranks(summary, "report --json", outputs.out_dir)
    if outputs.csv_tables is not None and summary:
        failures += check_ranks({**outputs.csv_tables, "meta": summary.get("meta")}, "report --csv", None)
    # the trace
    for path in outputs.traces:
        failures += check_trace(path)
    if summary and outputs.traces:
        failures += check_saves_are_io(summary, outputs.traces)
    return failures


def check_memory(summary: dict, explanation: dict | None, explain_text: str | None, source: str) -> list[str]:
    """What the compiled graphs save for the backward is one figure everywhere: per layer and per graph in the
    report as in explanation.json, and in `explain DIR`'s "saves X" lines; each step's peak is a step's."""
    from dynascope.artifacts.memory import GraphMemory, human_bytes

    failures = []
    accounts = [GraphMemory.from_dict(m) for m in (explanation or {}).get("memory") or []]
    layers = summary.get("memory_by_layer") or []
    saved = sum(a.saved_bytes for a in accounts)
    in_layers = sum(int(r.get("saved_bytes") or 0) for r in layers)
    if accounts and in_layers != saved:
        failures.append(f"[memory] {source} memory_by_layer saves {in_layers} B in all, explanation.json {saved} B")
    graphs = {(r.get("compile_id"), r.get("graph")): r for r in summary.get("memory_by_graph") or []
              if r.get("phase") == "forward" and r.get("saved_bytes") not in (None, "")}  # fmt: skip
    for a in accounts:
        row = graphs.get((a.compile_id, a.graph))
        if row is not None and int(row["saved_bytes"]) != a.saved_bytes:
            failures.append(f"[memory] {source} memory_by_graph {a.graph} saves {row['saved_bytes']} B, "
                            f"explanation.json {a.saved_bytes} B")  # fmt: skip
    if explain_text is not None:
        for a in accounts:
            if f"(compile {a.compile_id}" in explain_text and f"saves {human_bytes(a.saved_bytes)} in" not in explain_text:
                failures.append(f"[memory] explain DIR does not say compile {a.compile_id} saves "
                                f"{human_bytes(a.saved_bytes)}")  # fmt: skip
    steps = {r.get("step") for r in summary.get("by_step") or []} | {
        r.get("step") for r in summary.get("by_rank_step") or []}
    for r in summary.get("memory_by_step") or []:
        if steps and r.get("step") not in steps:
            failures.append(f"[memory] {source} memory_by_step has step {r.get('step')}, which by_step has not")
    return failures


def rank_explanation_files(out_dir: str | os.PathLike) -> list[str]:
    """The ranks' explanation.json files of a job's output directory: OUT/rank<R>/explanation.json (one output
    directory for the job), under OUT/<dir>/ (one output directory per rank under OUT), or beside a rank's
    traces in such a directory."""
    out = Path(out_dir)
    if not out.is_dir():
        return []
    return sorted(str(p) for p in out.rglob("explanation.json") if p.parent != out and "eager" not in p.parts)


def check_ranks(summary: dict, source: str, out_dir: str | os.PathLike | None) -> list[str]:
    """The many-ranks invariants (docs/ranks.md): the job's step is one rank's step (its slowest), never
    longer than the job; a rank's steps fit in the job's span; the parts add up per rank; per-rank rows add
    up to by_process; every rank's explanation beside the traces was read."""
    failures: list[str] = []
    by_rank = summary.get("by_rank") or []
    rank_steps = summary.get("by_rank_step") or []
    meta = summary.get("meta") or {}
    span = meta.get("span_us")
    if not by_rank:
        named = sorted({p.get("rank") for p in summary.get("by_process") or []
                        if isinstance(p.get("rank"), int) and p["rank"] >= 0})  # fmt: skip
        if len(named) > 1:
            failures.append(f"[by_rank] {source}: by_process has ranks {named}, by_rank has none")
        for row in summary.get("by_step") or []:
            if span is not None and (row.get("total_us") or 0) > span:
                failures.append(f"[job step<=span] {source} by_step step {row.get('step')}: {row['total_us'] / 1e6:.3f} s, longer than the span {span / 1e6:.3f} s")
        return failures
    ranks = {r.get("rank") for r in by_rank}
    steps = summary.get("by_step") or []
    per_rank = {(r.get("rank"), r.get("epoch"), r.get("step")): r for r in rank_steps}
    for row in steps:
        name = f"step {row.get('step')} (epoch {row.get('epoch')})"
        total = row.get("total_us") or 0
        if span is not None and total > span:
            failures.append(f"[job step<=span] {source} by_step {name}: {total / 1e6:.3f} s, longer than the job's span {span / 1e6:.3f} s")
        if (row.get("ranks") or 0) > len(ranks):
            failures.append(f"[job step] {source} by_step {name}: {row.get('ranks')} ranks had it, the job has {len(ranks)}")
        own = per_rank.get((row.get("rank"), row.get("epoch"), row.get("step")))
        if own is None:
            failures.append(f"[job step] {source} by_step {name}: its rank {row.get('rank')} has no such step in by_rank_step")
            continue
        if any((own.get(p) or 0) != (row.get(p) or 0) for p in ("total_us", *STEP_PARTS) if p in row):
            failures.append(f"[job step] {source} by_step {name}: not rank {row.get('rank')}'s step (wall {total} µs, that rank's {own.get('total_us')} µs)")
        longest = max((r.get("total_us") or 0) for k, r in per_rank.items() if k[1:] == (row.get("epoch"), row.get("step")))
        if total != longest:
            failures.append(f"[job step] {source} by_step {name}: wall {total} µs, the slowest rank's is {longest} µs")
    walls: dict = defaultdict(int)
    for r in rank_steps:
        if r.get("step") is not None:
            walls[r.get("rank")] += r.get("total_us") or 0
        parts = [r.get(p) or 0 for p in STEP_PARTS if p in r]
        if parts and abs(sum(parts) - (r.get("total_us") or 0)) > len(parts):
            failures.append(f"[step parts] {source} by_rank_step rank {r.get('rank')} step {r.get('step')}: parts add to {sum(parts)} µs, total {r.get('total_us')} µs")
    for rank, wall in walls.items():
        if span is not None and wall > span:
            failures.append(f"[job step<=span] {source} rank {rank}'s steps add to {wall / 1e6:.3f} s, longer than the job's span {span / 1e6:.3f} s")
    procs = summary.get("by_process") or []
    for r in by_rank:
        mine = [p for p in procs if p.get("rank") == r.get("rank")]
        if len(mine) != (r.get("processes") or 0):
            failures.append(f"[by_rank] {source} rank {r.get('rank')}: {r.get('processes')} processes, by_process has {len(mine)}")
        compile_us = sum(p.get("compile_us") or 0 for p in mine)
        if compile_us != (r.get("compile_us") or 0):
            failures.append(f"[by_rank] {source} rank {r.get('rank')}: compile {r.get('compile_us')} µs, its processes' {compile_us} µs")
        n = len([s for s in rank_steps if s.get("rank") == r.get("rank") and s.get("step") is not None])
        if n and n != r.get("steps"):
            failures.append(f"[by_rank] {source} rank {r.get('rank')}: {r.get('steps')} steps, by_rank_step has {n}")
    if out_dir is not None:
        files = rank_explanation_files(out_dir)
        read = {os.path.realpath(p) for p in (summary.get("explanations") or {}).values() if p}
        unread = [f for f in files if os.path.realpath(f) not in read]
        if unread:
            failures.append(f"[rank explanations] {source}: not read: {', '.join(unread)}")
        if files and len(read) < len(ranks):
            failures.append(f"[rank explanations] {source}: {len(read)} explanations read for {len(ranks)} ranks")
    return failures


def _saves(paths: list[str]) -> dict[str, list[int]]:
    """Durations (µs) of every torch.save in the traces, per file, in time order."""
    found: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for path in paths:
        lines, _ = readable_prefix(path)
        records = [json.loads(line) for line in lines[1:] if line.strip()]
        names = {r["args"]["value"]: r["args"]["name"] for r in records if r.get("ph") == "M" and r.get("name") == "FH"}
        for r in records:
            if r.get("ph") == "X" and r.get("name") == "torch.save":
                fname = names.get((r.get("args") or {}).get("fhash"))
                if fname:
                    found[fname].append((r["ts"], r["dur"]))
    return {f: [d for _, d in sorted(v)] for f, v in found.items()}


def check_saves_are_io(summary: dict, paths: list[str]) -> list[str]:
    """A checkpoint saved inside a step is that step's I/O (not its forward): the step's I/O holds the
    torch.save it lists. The k-th step that lists a file is matched with the file's k-th save when every
    save of it is in a step; else the step must hold at least the file's shortest save."""
    saves = _saves(paths)
    listed: Counter = Counter(f for r in summary.get("by_step") or [] for f in set(r.get("saved") or []))
    seen: Counter = Counter()
    failures = []
    for r in summary.get("by_step") or []:
        expected = 0
        for fname in sorted(set(r.get("saved") or [])):
            durs = saves.get(fname)
            if not durs:
                continue
            k = seen[fname]
            seen[fname] += 1
            expected += durs[k] if listed[fname] == len(durs) else min(durs)
        io = r.get("io_us") or 0
        if expected and io + 1 < expected:
            failures.append(
                f"[I/O part] report --json by_step step {r.get('step')} (epoch {r.get('epoch')}): saved {', '.join(os.path.basename(f) for f in r['saved'])} "
                f"({expected} µs of torch.save in the trace) but its I/O part is {io} µs (forward {r.get('forward_us')} µs, other {r.get('other_us')} µs)"
            )
    return failures


def _check_explain_rows(text: str, total: Duration) -> list[str]:
    """The rows of explain's compile-time table (id, total s, ...) add to its 'in all'."""
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("Compile times ("))
    added, rows = 0.0, 0
    for line in lines[start + 2 :]:
        m = re.match(r"^\s+(\S+/\S+)\s+([\d.]+)\s", line)
        if not m:
            break
        if m.group(1) in ("None", "-"):
            return [f"[compile ids] explain DIR: a compile-time row with id {m.group(1)!r}"]
        added += float(m.group(2))
        rows += 1
    if rows and not close(added, total.seconds, total.tolerance + 0.0005 * rows):
        return [f"[compile rows] explain DIR: compile-time rows add to {added:.3f} s, its total says {total.text}"]
    return []


def check_trace(path: str) -> list[str]:
    """Every op/kernel event lies inside its graph call, on its thread (read without dynascope's reader)."""
    name = os.path.basename(path)
    try:
        lines, _cut = readable_prefix(path)
        records = [json.loads(line) for line in lines[1:] if line.strip()] if lines and lines[0] == "[" else load(path)
    except (OSError, ValueError) as error:
        return [f"[trace] {name}: unreadable ({error})"]
    events = {r["id"]: r for r in records if r.get("ph") == "X" and "id" in r}
    failures = []
    outside = 0
    example = None
    for e in events.values():
        if e.get("cat") != "dynamo":
            continue
        parent = events.get((e.get("args") or {}).get("p_idx"))
        if parent is None or parent.get("cat") != "dynamo.graph":
            continue  # eager op events outside a graph call are not this check's business
        if e["ts"] < parent["ts"] or e["ts"] + e["dur"] > parent["ts"] + parent["dur"] or (e["pid"], e["tid"]) != (parent["pid"], parent["tid"]):
            outside += 1
            example = example or (e, parent)
    if outside:
        e, parent = example
        failures.append(
            f"[inside graph call] {name}: {outside} op/kernel events lie outside their graph call; e.g. {e['name']} "
            f"[{e['ts']}, +{e['dur']}] in {parent['name']} [{parent['ts']}, +{parent['dur']}]"
        )
    return failures


def assert_invariants(out_dir: str | os.PathLike, run_stdout: str | None = None) -> None:
    """For any test that has a real run's outputs: every view of them holds every invariant."""
    failures = check(collect(out_dir, run_stdout))
    assert not failures, f"{len(failures)} invariants broken:" + report(failures)


def report(failures: list[str]) -> str:
    return "\n".join(["", *failures]) if failures else "all invariants hold"


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="check a dynascope run directory's outputs against the invariants")
    parser.add_argument("out_dir")
    parser.add_argument("--stdout", help="a file holding the run's piped stdout")
    args = parser.parse_args(argv)
    stdout = Path(args.stdout).read_text() if args.stdout else None
    failures = check(collect(args.out_dir, stdout))
    print(report(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
