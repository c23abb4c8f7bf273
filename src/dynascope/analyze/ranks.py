"""Many ranks: the job's steps, one row per rank, and where the ranks parted ways (docs/ranks.md).

A rank is a process whose trace header names one (`rank` >= 0); a rank's DataLoader workers carry its rank
too. Steps are per rank (`by_rank_step`); the job's step (`by_step`) is the slowest rank's: its wall time
and parts, with `rank` (that rank) and `ranks` (how many ranks had the step). A trace with no ranks keeps
its by_step as it always was.

Divergence (`divergence`): from the ranks' explanations and traces alone, what one rank did differently
from the others, first first: recompiled at another step (with the guard that failed), compiled other
graphs, took other graph breaks, issued other collectives (compared per process group by sequence number).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable

import polars as pl

from dynascope.artifacts.explanation import CompileTime, GraphBreak, Recompile, Report

__all__ = [
    "DIVERGENCE_SCHEMA",
    "RANK_SCHEMA",
    "by_rank",
    "divergence",
    "job_steps",
    "rank_explanation_paths",
]

RANK_SCHEMA = {
    "rank": pl.Int64, "host": pl.String, "pid": pl.Int64, "processes": pl.Int64, "steps": pl.Int64,
    "step_median_us": pl.Int64, "compile_us": pl.Int64, "recompiles": pl.Int64, "graph_breaks": pl.Int64,
    "graphs": pl.Int64, "status": pl.String, "explanation": pl.Boolean,
}  # fmt: skip
DIVERGENCE_SCHEMA = {
    "kind": pl.String, "at": pl.String, "step": pl.Int64, "ranks": pl.String, "detail": pl.String,
    "source": pl.String, "hang_risk": pl.Boolean,
}  # fmt: skip
# operations whose every rank gives the same number of bytes (a mismatch is a bug, not a layout)
SAME_BYTES = ("all_reduce", "broadcast", "reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "barrier")
KIND_ORDER = ("collective", "recompile", "graph break", "graphs")


# ----------------------------------------------------------------------------------------------
# steps


def job_steps(step: pl.DataFrame, columns: list) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(by_step, by_rank_step) from the merged step partial (rank, epoch, step, ...). Without ranks
    by_rank_step is empty and by_step is the steps as they always were."""
    ranked = step.filter(pl.col("rank").is_not_null())
    if ranked.height == 0:
        rows = step.sort(["epoch", "step"], nulls_last=False).select(columns)
        return rows, pl.DataFrame(schema={"rank": pl.Int64, **rows.schema})
    by_rank_step = step.sort(["rank", "epoch", "step"], nulls_last=False).select("rank", *columns)
    # per (epoch, step): the slowest rank's row (ties: the lowest rank), and how many ranks had it
    job = (
        step.sort(["total_us", "rank"], descending=[True, False], nulls_last=True)
        .group_by(["epoch", "step"], maintain_order=True)
        .agg(pl.all().first(), pl.col("rank").count().alias("ranks"))
        .sort(["epoch", "step"], nulls_last=False)
    )
    by_step = job.select(*columns, "rank", pl.col("ranks").cast(pl.Int64))
    return by_step, by_rank_step


# ----------------------------------------------------------------------------------------------
# per rank


def by_rank(proc_file: pl.DataFrame, process: pl.DataFrame, by_rank_step: pl.DataFrame,
            explanations: dict[int, Report]) -> pl.DataFrame:  # fmt: skip
    """One row per rank: host, its main process (the one with the most events) and how many processes it
    had (its DataLoader workers), its steps and their median, compile time, recompiles, graph breaks,
    compiled graphs (compile ids begun), and how its main trace file ended (status)."""
    ranked = proc_file.filter(pl.col("rank").is_not_null())
    if ranked.height == 0:
        return pl.DataFrame(schema=RANK_SCHEMA)
    from dynascope.analyze.stepstats import step_rows

    compile_us = {
        r: int(v or 0)
        for r, v in process.filter(pl.col("rank") >= 0).group_by("rank").agg(pl.col("compile_us").sum()).iter_rows()
    }
    rows = []
    for (rank,), g in sorted(ranked.partition_by("rank", as_dict=True).items()):
        main = g.sort(["events", "pid"], descending=[True, False]).row(0, named=True)
        ids = sorted({i for lst in g.get_column("compile_ids").to_list() for i in (lst or [])})
        steps = step_rows(by_rank_step.filter(pl.col("rank") == rank))
        totals = sorted(int(v or 0) for v in steps.get_column("total_us").to_list())
        expl = explanations.get(rank)
        recompiles = len(expl.recompiles) if expl else sum(1 for i in ids if _attempt(i) > 0)
        breaks = sum(_count(b.count) for b in expl.graph_breaks) if expl else None
        rows.append({
            "rank": rank, "host": main["host"], "pid": main["pid"], "processes": g.height, "steps": len(totals),
            "step_median_us": totals[(len(totals) + 1) // 2 - 1] if totals else None,
            "compile_us": compile_us.get(rank, 0), "recompiles": recompiles, "graph_breaks": breaks,
            "graphs": len(ids), "status": main["status"], "explanation": expl is not None,
        })  # fmt: skip
    return pl.DataFrame(rows, schema=RANK_SCHEMA)


def _count(value: object) -> int:
    """A graph break's count as a number (1 where the file has none, or not a whole number)."""
    return value if isinstance(value, int) and value > 0 else 1


def _attempt(compile_id: str) -> int:
    tail = str(compile_id).rsplit("/", 1)[-1] if "/" in str(compile_id) else "0"
    digits = "".join(ch for ch in tail if ch.isdigit())
    return int(digits) if digits else 0


# ----------------------------------------------------------------------------------------------
# explanations


def rank_explanation_paths(paths: Iterable, file_ranks: dict[str, int],
                           name: str = "explanation.json") -> dict[int, str]:  # fmt: skip
    """Every rank's explanation: `DIR/rank<R>/explanation.json` under a directory given or beside a trace
    (the layout `dynascope run` writes for a job), else the one beside a rank's own trace file (one output
    directory per rank). `file_ranks`: trace file path -> rank."""
    found: dict[int, str] = {}
    dirs = []
    for raw in paths:
        p = os.fspath(raw)
        if os.path.isdir(p):
            dirs.append(p)
    dirs += sorted({os.path.dirname(os.path.abspath(f)) for f in file_ranks})
    for d in dirs:
        try:
            entries = sorted(os.listdir(d))
        except OSError:
            continue
        for entry in entries:
            if entry.startswith("rank") and entry[4:].isdigit():
                candidate = os.path.join(d, entry, name)
                if os.path.isfile(candidate):
                    found.setdefault(int(entry[4:]), candidate)
    beside: dict[str, set[int]] = {}
    for f, rank in file_ranks.items():
        beside.setdefault(os.path.dirname(os.path.abspath(f)), set()).add(rank)
    for d, ranks in beside.items():
        candidate = os.path.join(d, name)
        if len(ranks) == 1 and os.path.isfile(candidate):  # a directory of one rank's files
            found.setdefault(next(iter(ranks)), candidate)
    return dict(sorted(found.items()))


# ----------------------------------------------------------------------------------------------
# divergence


def _ranks_text(ranks: Iterable[int]) -> str:
    return ", ".join(str(r) for r in sorted(ranks))


def _plural(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {_ranks_text(ranks)}"


def _short(path: str | None, line: int | None) -> str | None:
    if not path:
        return None
    return f"{os.path.basename(path)}:{line}" if line is not None else os.path.basename(path)


def _compile_steps(by_rank_step: pl.DataFrame) -> dict[tuple[int, str], int]:
    """(rank, compile id) -> the step it began in."""
    out: dict[tuple[int, str], int] = {}
    if by_rank_step.height == 0 or "compile_ids" not in by_rank_step.columns:
        return out
    for rank, step, ids in by_rank_step.select("rank", "step", "compile_ids").iter_rows():
        for cid in ids or []:
            if step is not None:
                out.setdefault((rank, cid), step)
    return out


def divergence(by_rank_step: pl.DataFrame, explanations: dict[int, Report], comm_seq: pl.DataFrame,
               ranks: list[int]) -> pl.DataFrame:  # fmt: skip
    """Where the ranks did different things, the first first (by step, then kind): kind ("recompile",
    "graphs", "graph break", "collective"), at (step / compile id / collective), step, ranks (those that
    differ), detail (words), source (the guard's line or the break's; the collective's group and sequence
    number), hang_risk. Empty with fewer than two ranks."""
    if len(ranks) < 2:
        return pl.DataFrame(schema=DIVERGENCE_SCHEMA)
    at_step = _compile_steps(by_rank_step)
    rows = _collective_rows(comm_seq, ranks)
    explained = {r: e for r, e in explanations.items() if r in ranks}
    if len(explained) >= 2:
        rows += _recompile_rows(explained, at_step)
        rows += _break_rows(explained, at_step)
        rows += _graph_rows(explained, at_step)
    rows.sort(key=lambda r: (r["step"] is None, r["step"] if r["step"] is not None else 0,
                             KIND_ORDER.index(r["kind"])))  # fmt: skip
    return pl.DataFrame(rows, schema=DIVERGENCE_SCHEMA)


def _recompile_rows(expl: dict[int, Report], at_step: dict) -> list[dict]:
    # per (function, file, line, reason): the ranks that recompiled for it, and at which step
    seen: dict[tuple, dict[int, tuple[int | None, Recompile]]] = {}
    for rank, e in expl.items():
        for rc in e.recompiles:
            key = (rc.function, rc.file, rc.line, rc.reason)
            step = at_step.get((rank, rc.compile_id))
            seen.setdefault(key, {}).setdefault(rank, (step, rc))
    out = []
    for (function, file, line, reason), by in seen.items():
        steps = {s for s, _ in by.values()}
        if set(by) == set(expl) and len(steps) == 1:
            continue  # every rank recompiled for it at the same step
        first = min(by.items(), key=lambda kv: (kv[1][0] is None, kv[1][0] or 0, kv[0]))
        step, rc = first[1]
        who = sorted(r for r, (s, _) in by.items() if s == step)
        others = sorted(set(expl) - set(by))
        where = f" at step {step}" if step is not None else ""
        detail = f"{_plural(who)} recompiled {function or 'a function'}{where}: {reason}"
        if others:
            detail += f"; {_plural(others)} did not"
        else:
            detail += "; the other ranks at other steps"
        if others or len(steps) > 1:
            detail += " (while it compiles, the others wait for it in their next collective)"
        src = _short(rc.call_file or file, rc.call_line or line)
        out.append({
            "kind": "recompile", "at": f"step {step}" if step is not None else str(rc.compile_id),
            "step": step, "ranks": _ranks_text(who), "detail": detail, "source": src, "hang_risk": True,
        })  # fmt: skip
    return out


def _break_key(b: GraphBreak) -> tuple:
    return (b.reason, b.file, b.line)


def _break_rows(expl: dict[int, Report], at_step: dict) -> list[dict]:
    seen: dict[tuple, dict[int, GraphBreak]] = {}
    for rank, e in expl.items():
        for b in e.graph_breaks:
            seen.setdefault(_break_key(b), {}).setdefault(rank, b)
    out = []
    for (reason, file, line), by in seen.items():
        if set(by) == set(expl):
            continue
        who = sorted(by)
        others = sorted(set(expl) - set(by))
        b = by[who[0]]
        steps = [at_step.get((who[0], c)) for c in b.compile_ids or []]
        step = min((s for s in steps if s is not None), default=None)
        where = f" at step {step}" if step is not None else ""
        out.append({
            "kind": "graph break", "at": f"step {step}" if step is not None else ", ".join(b.compile_ids or []),
            "step": step, "ranks": _ranks_text(who),
            "detail": f"{_plural(who)} took a graph break{where} that {_plural(others)} did not: {reason}",
            "source": _short(file, line), "hang_risk": False,
        })  # fmt: skip
    return out


def _graph_rows(expl: dict[int, Report], at_step: dict) -> list[dict]:
    """Ranks that compiled a different number of graphs, or graphs of different sizes, other than by the
    recompiles already named."""
    per: dict[int, dict[str, int | None]] = {}
    recompiled = {r: {rc.compile_id for rc in e.recompiles} for r, e in expl.items()}
    for rank, e in expl.items():
        per[rank] = {
            str(ct.compile_id): ct.graph_op_count for ct in e.compile_times if ct.compile_id not in recompiled[rank]
        }
    ids = sorted({i for m in per.values() for i in m})
    for cid in ids:
        have = {r: m[cid] for r, m in per.items() if cid in m}
        sizes = set(have.values())
        if len(have) == len(per) and len(sizes) == 1:
            continue
        step = min((s for r in have if (s := at_step.get((r, cid))) is not None), default=None)
        if len(have) < len(per):
            missing = sorted(set(per) - set(have))
            detail = f"{_plural(sorted(have))} compiled {cid}, {_plural(missing)} did not"
            who = sorted(have) if len(have) <= len(missing) else missing
        else:
            by_size: dict = {}
            for r, n in have.items():
                by_size.setdefault(n, []).append(r)
            detail = f"{cid} has a different graph on each side: " + "; ".join(
                f"{_plural(sorted(rs))}: {n} ops" for n, rs in sorted(by_size.items(), key=lambda kv: str(kv[0]))
            )
            who = min(by_size.values(), key=len)
        return [{
            "kind": "graphs", "at": cid, "step": step, "ranks": _ranks_text(who), "detail": detail, "source": None,
            "hang_risk": False,
        }]  # fmt: skip  (the first only: later ids follow from it)
    return []


def _collective_rows(comm: pl.DataFrame, ranks: list[int]) -> list[dict]:
    """The first collective, per process group, that the ranks did not all issue alike: another operation,
    another byte count (where every rank gives the same), or none at all (a rank that never issued it)."""
    c = comm.filter(pl.col("rank").is_not_null())
    if c.height == 0:
        return []
    in_comm = sorted(set(c.get_column("rank").to_list()))
    out = []
    for (pg,), g in sorted(c.partition_by("pg", as_dict=True).items()):
        ranks_here = sorted(set(g.get_column("rank").to_list()))
        if len(ranks_here) < 2 and len(in_comm) < 2:
            continue
        expected = set(ranks_here) | (set(in_comm) if pg in ("0", "default_pg") else set())
        per_seq = g.sort("seq").group_by("seq", maintain_order=True).agg("rank", "op", "bytes", "step")
        for seq, rs, ops, nbytes, steps in per_seq.iter_rows():
            kinds = {(o, b if o in SAME_BYTES else None) for o, b in zip(ops, nbytes, strict=True)}
            missing = sorted(expected - set(rs))
            if len(kinds) == 1 and not missing:
                continue
            step = min((s for s in steps if s is not None), default=None)
            if len(kinds) > 1:
                by_kind: dict = {}
                for r, o, b in zip(rs, ops, nbytes, strict=True):
                    by_kind.setdefault((o, b), []).append(r)
                who = min(by_kind.values(), key=len)
                detail = f"collective {seq} of group {pg}: " + "; ".join(
                    f"{_plural(sorted(v))} issued {o} ({b:,} bytes)" for (o, b), v in by_kind.items()
                )
            else:
                who = missing
                o = ops[0]
                detail = (f"collective {seq} of group {pg}: {_plural(sorted(rs))} issued {o}, {_plural(missing)} "
                          "never did (the others wait for it)")  # fmt: skip
            detail += " — the ranks wait in different collectives: a hang"
            out.append({
                "kind": "collective", "at": f"{pg}#{seq}", "step": step, "ranks": _ranks_text(who),
                "detail": detail, "source": f"group {pg}, sequence {seq}", "hang_risk": True,
            })  # fmt: skip
            break
    return out


def merged_explanation(explanations: dict[int, Report]) -> Report:
    """One explanation for the job's recompile and graph-break tables: the lowest rank's, with every other
    rank's recompiles, graph breaks, compile records, explained functions, DDP splits, cache-limit hits,
    eager fallbacks, notes and graphs' memory accounts that it lacks added."""
    ordered = [explanations[r] for r in sorted(explanations)]
    recompiles: dict[tuple, Recompile] = {}
    breaks: dict[tuple, GraphBreak] = {}
    times: dict[str, CompileTime] = {}
    for e in ordered:
        for rc in e.recompiles:
            recompiles.setdefault((rc.compile_id, rc.reason, rc.file, rc.line), rc)
        for b in e.graph_breaks:
            key = _break_key(b)
            kept = breaks.get(key)
            if kept is None:
                breaks[key] = b
            else:
                ids = sorted(set(kept.compile_ids or []) | set(b.compile_ids or []))
                breaks[key] = dataclasses.replace(kept, count=max(_count(kept.count), _count(b.count)), compile_ids=ids)
        for t in e.compile_times:
            times.setdefault(str(t.compile_id), t)

    def each_once(attr: str) -> list:  # every rank's items, each one once, in rank order
        out: list = []
        for e in ordered:
            out += [item for item in getattr(e, attr) if item not in out]
        return out

    return dataclasses.replace(
        ordered[0], recompiles=list(recompiles.values()), graph_breaks=list(breaks.values()),
        compile_times=list(times.values()), explanations=each_once("explanations"), ddp_splits=each_once("ddp_splits"),
        cache_limit_hits=each_once("cache_limit_hits"), eager_fallbacks=each_once("eager_fallbacks"),
        notes=each_once("notes"), memory=_memory_once(ordered),
    )  # fmt: skip


def _memory_once(ordered: list[Report]) -> list:
    """Each graph's memory account once (the lowest rank's): a rank's figures, not the job's sum; a graph only
    a later rank compiled (ranks that compile differently) adds its own."""
    out, seen = [], set()
    for e in ordered:
        for account in e.memory:
            if (account.compile_id, account.graph) not in seen:
                seen.add((account.compile_id, account.graph))
                out.append(account)
    return out


def with_ranks(table: pl.DataFrame, explanations: dict[int, Report], key: str) -> pl.DataFrame:
    """`table` (recompiles or graph_breaks) with `ranks`: the ranks whose explanation has each row ("0, 1"; null
    for a row on every rank), where not every rank has every row; unchanged otherwise."""
    every = sorted(explanations)
    compiled = {r: {str(t.compile_id) for t in e.compile_times} for r, e in explanations.items()}
    found: list[list[int]] = []
    for row in table.iter_rows(named=True):
        ids = set(row.get("compile_ids") or [])
        who = []
        for rank in every:
            if key == "recompiles":
                hit = any(i.compile_id in ids and str(row.get("reason") or "").startswith(str(i.reason))
                          for i in explanations[rank].recompiles)  # fmt: skip
            else:
                hit = any(set(i.compile_ids or []) & ids or i.reason == row.get("reason")
                          for i in explanations[rank].graph_breaks)  # fmt: skip
            if hit:
                who.append(rank)
        if not who:  # a row no explanation lists (a DDP split seen in the trace): the ranks that compiled it
            who = [rank for rank in every if ids & compiled[rank]] or every
        found.append(who)
    if all(w == every for w in found):
        return table
    # null: on every rank
    texts = [_ranks_text(w) if w and w != every else None for w in found]
    return table.with_columns(pl.Series("ranks", texts, dtype=pl.String))
