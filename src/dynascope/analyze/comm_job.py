"""Collectives across the job (analyze/comm.py reads them per file): joined by (process group, sequence
number), clocks aligned per host, stragglers, and hangs."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import orjson
import polars as pl

from dynascope.analyze.comm import DOING, DOING_LABELS, GAP_COLUMNS, SYMMETRIC

__all__ = ["clock_offsets", "collectives", "finish_tables", "hang_lines", "hangs", "stragglers"]


def finish_tables(comm: pl.DataFrame, procs: pl.DataFrame, t0: int | None) -> dict[str, pl.DataFrame]:
    """clocks, collectives, stragglers and hangs from the merged partial tables; times are µs from `t0`
    (the job's first event) on aligned clocks."""
    clocks = clock_offsets(comm, procs)
    offset = dict(clocks.select("rank", "offset_us").iter_rows()) if clocks.height else {}
    base = int(t0 or 0)
    c = comm
    if c.height:
        off = pl.col("rank").replace_strict(offset, default=0, return_dtype=pl.Int64) if offset else pl.lit(0)
        c = c.with_columns(
            (pl.col("issue_us") - off - base).alias("issue_us"), (pl.col("done_us") - off - base).alias("done_us")
        )
    joined = collectives(c)
    return {
        "clocks": clocks,
        "collectives": joined,
        "stragglers": stragglers(c, joined),
        "hangs": hangs(c, procs, base, offset),
    }


_CLOCK_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "rank": pl.Int64, "host": pl.String, "offset_us": pl.Int64, "residual_us": pl.Int64, "collectives": pl.Int64,
    "how": pl.String,
}  # fmt: skip


def clock_offsets(comm: pl.DataFrame, procs: pl.DataFrame) -> pl.DataFrame:
    """Per rank: its clock's offset against the reference host (rank 0's, or the lowest rank's), estimated
    per host from the completions of the collectives both hosts completed (module docstring)."""
    hosts = _rank_hosts(comm, procs)
    if not hosts:
        return pl.DataFrame(schema=_CLOCK_SCHEMA)
    ref_rank = min(hosts)
    ref_host = hosts[ref_rank]
    done = comm.filter(
        pl.col("done_us").is_not_null() & pl.col("rank").is_not_null() & (pl.col("seq") >= 0)
        & pl.col("op").str.contains("|".join(SYMMETRIC))
    ).with_columns(
        pl.col("rank").replace_strict(hosts, default=None, return_dtype=pl.String).alias("__host")
    )
    per_host = done.group_by("__host", "pg", "seq").agg(pl.col("done_us").median().alias("t"))
    ref = per_host.filter(pl.col("__host") == ref_host).select("pg", "seq", pl.col("t").alias("t0"))
    found: dict[str, tuple[int, int, int]] = {}
    for h in sorted(set(hosts.values()) - {ref_host}):
        d = per_host.filter(pl.col("__host") == h).join(ref, on=["pg", "seq"]).select(pl.col("t") - pl.col("t0"))
        diffs = d.to_series().to_numpy()
        if len(diffs):
            med = float(np.median(diffs))
            found[h] = (round(med), round(float(np.median(np.abs(diffs - med)))), len(diffs))
    rows: list[tuple] = []
    for rank, host in sorted(hosts.items()):
        if host == ref_host:
            how = "reference clock" if rank == ref_rank else f"same host as rank {ref_rank}: one clock"
            rows.append((rank, host, 0, 0, 0, how))
        elif host in found:
            off, res, n = found[host]
            rows.append((rank, host, off, res, n, f"aligned by {n} collective completions"))
        else:
            rows.append((rank, host, 0, None, 0, "no collective completed on both hosts: not aligned"))
    return pl.DataFrame(rows, schema=_CLOCK_SCHEMA, orient="row")


def _rank_hosts(comm: pl.DataFrame, procs: pl.DataFrame) -> dict[int, str]:
    out: dict[int, str] = {}
    for frame in (procs, comm):
        if frame.height and {"rank", "host"} <= set(frame.columns):
            for r, h in frame.select("rank", "host").drop_nulls("rank").unique().iter_rows():
                out.setdefault(int(r), str(h or ""))
    return out


_COLL_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "pg": pl.String, "seq": pl.Int64, "op": pl.String, "source": pl.String, "bytes": pl.Int64,
    "group_size": pl.Int64, "ranks": pl.Int64, "completed": pl.Int64, "all_completed": pl.Boolean,
    "first_issue_us": pl.Int64, "last_issue_us": pl.Int64, "last_rank": pl.Int64, "late_us": pl.Int64,
    "last_done_us": pl.Int64, "epoch": pl.Int64, "step": pl.Int64, "rank_list": pl.List(pl.Int64),
    "issue_list": pl.List(pl.Int64), "done_list": pl.List(pl.Int64),
}  # fmt: skip


def collectives(c: pl.DataFrame) -> pl.DataFrame:
    """One row per (pg, seq) (sequence numbers known): module docstring. Sorted by pg, seq."""
    k = c.filter((pl.col("seq") >= 0) & pl.col("rank").is_not_null()) if c.height else c
    if k.height == 0:
        return pl.DataFrame(schema=_COLL_SCHEMA)
    k = k.sort("rank", "issue_us").unique(["pg", "seq", "rank"], keep="first")
    g = k.sort("rank").group_by("pg", "seq").agg(
        pl.col("op").mode().sort().first(),
        pl.col("source").drop_nulls().mode().sort().first(),
        pl.col("bytes").max(),
        pl.col("group_size").max(),
        pl.len().cast(pl.Int64).alias("ranks"),
        pl.col("done_us").is_not_null().sum().cast(pl.Int64).alias("completed"),
        pl.col("issue_us").min().alias("first_issue_us"),
        pl.col("issue_us").max().alias("last_issue_us"),
        pl.col("rank").sort_by("issue_us", "rank").last().alias("last_rank"),
        pl.col("done_us").max().alias("last_done_us"),
        pl.col("epoch").sort_by("issue_us", "rank").last().alias("epoch"),
        pl.col("step").sort_by("issue_us", "rank").last().alias("step"),
        pl.col("rank").alias("rank_list"),
        pl.col("issue_us").alias("issue_list"),
        pl.col("done_us").alias("done_list"),
    )
    expected = pl.coalesce("group_size", "ranks")
    g = g.with_columns(
        (pl.col("last_issue_us") - pl.col("first_issue_us")).alias("late_us"),
        ((pl.col("completed") >= expected) & (pl.col("ranks") >= expected)).alias("all_completed"),
    )
    return g.select([pl.col(n).cast(t) for n, t in _COLL_SCHEMA.items()]).sort(
        pl.col("pg").str.len_chars(), "pg", "seq"
    )


_STRAG_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "rank": pl.Int64, "epoch": pl.Int64, "step": pl.Int64, "op": pl.String, "pg": pl.String, "seq": pl.Int64,
    "late_us": pl.Int64, "collectives": pl.Int64, "doing": pl.String, "doing_us": pl.Int64,
}  # fmt: skip
STRAGGLER_ROWS = 50
MIN_LATE_US = 100  # a rank less late than this is on time


def stragglers(c: pl.DataFrame, joined: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, step) where that rank issued collectives last (per collective where there are no steps):
    the most it was late (op, pg, seq of that collective), how many collectives it was last in, and what it
    did instead (module docstring). Most late first, at most STRAGGLER_ROWS rows."""
    if joined.height == 0 or c.height == 0:
        return pl.DataFrame(schema=_STRAG_SCHEMA)
    late = joined.filter((pl.col("ranks") >= 2) & (pl.col("late_us") >= MIN_LATE_US)).select(
        "pg", "seq", "op", "last_rank", "late_us"
    )
    if late.height == 0:
        return pl.DataFrame(schema=_STRAG_SCHEMA)
    rows = c.filter(pl.col("seq") >= 0).join(late.select("pg", "seq"), on=["pg", "seq"])
    # the others' median gap parts before the same collective
    others = rows.join(late.select("pg", "seq", pl.col("last_rank").alias("rank")), on=["pg", "seq", "rank"],
                       how="anti").group_by("pg", "seq").agg(pl.col(c).median() for c in GAP_COLUMNS)  # fmt: skip
    mine = rows.join(late.select("pg", "seq", pl.col("last_rank").alias("rank"), "late_us"), on=["pg", "seq", "rank"])
    mine = mine.join(others, on=["pg", "seq"], how="left", suffix="_med")
    excess = [(pl.col(g) - pl.col(f"{g}_med").fill_null(0)).clip(lower_bound=0).alias(f"x_{d}")
              for g, d in zip(GAP_COLUMNS, DOING, strict=True)]  # fmt: skip
    mine = mine.with_columns(excess)
    # one row per (rank, step); per collective where the rank has no steps
    group = pl.when(pl.col("step").is_null() & pl.col("epoch").is_null()).then(pl.col("seq")).otherwise(None)
    per = (
        mine.with_columns(group.alias("__one"))
        .sort(["late_us", "seq"], descending=[True, False], maintain_order=True)
        # one row a rank and step over every group (a step's functional collectives, group "<pg>/functional",
        # made a second row that printed like the first): the most late collective names it
        .group_by("rank", "epoch", "step", "__one", maintain_order=True)
        .agg(
            pl.col("pg").first(), pl.col("op").first(), pl.col("seq").first(), pl.col("late_us").first(),
            pl.len().alias("collectives"),
            *(pl.col(f"x_{d}").sum() for d in DOING), pl.col("gap_compile_ids").drop_nulls().first().alias("ids"),
        )
    )
    out = []
    for r in per.iter_rows(named=True):
        what = max(DOING, key=lambda d: r[f"x_{d}"])
        label = DOING_LABELS[what]
        if what == "compile" and r["ids"]:
            again = any(_attempt(i) > 0 for i in str(r["ids"]).split(","))
            label = f"{'recompile' if again else 'compile'} {r['ids']}"
        out.append({
            "rank": r["rank"], "epoch": r["epoch"], "step": r["step"], "op": r["op"], "pg": r["pg"], "seq": r["seq"],
            "late_us": r["late_us"], "collectives": r["collectives"],
            "doing": label if r[f"x_{what}"] > 0 else "nothing stands out",
            "doing_us": min(int(r[f"x_{what}"]), int(r["late_us"])),
        })  # fmt: skip
    frame = pl.DataFrame(out, schema=_STRAG_SCHEMA)
    return frame.sort(["late_us", "rank", "epoch", "step"], descending=[True, False, False, False],
                      nulls_last=True).head(STRAGGLER_ROWS)  # fmt: skip


def _attempt(compile_id: str) -> int:
    tail = compile_id.rsplit("/", 1)[-1] if "/" in compile_id else "0"
    digits = "".join(ch for ch in tail if ch.isdigit())
    return int(digits) if digits else 0


_HANG_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "rank": pl.Int64, "state": pl.String, "op": pl.String, "pg": pl.String, "seq": pl.Int64,
    "since_us": pl.Int64, "epoch": pl.Int64, "step": pl.Int64, "waits_for": pl.String, "where": pl.String,
    "file_end": pl.String,
}  # fmt: skip


def hangs(c: pl.DataFrame, procs: pl.DataFrame, base: int = 0, offset: dict | None = None) -> pl.DataFrame:
    """Collectives a rank waited in that were never completed where its file was cut short, or that some
    rank of the group never issued (a job stopped while one rank waited for another: the waiting rank's
    collective may still end as completed when the stop aborts it). Per waiting rank ("waiting") its first
    such collective; per rank of that collective's group that never issued it ("never issued") where it was
    instead. Empty when every rank issued every collective and no cut file holds one pending."""
    if procs.height == 0 or c.height == 0:
        return pl.DataFrame(schema=_HANG_SCHEMA)
    # a rank's main process: the one with the most events (its DataLoader workers carry its rank too)
    ranked = procs.filter(pl.col("rank").is_not_null()).sort(["events", "pid"], descending=[True, False])
    ranked = ranked.unique("rank", keep="first", maintain_order=True).sort("rank")
    end_of = {r["rank"]: _file_end(r) for r in ranked.iter_rows(named=True)}
    proc_of = {r["rank"]: r for r in ranked.iter_rows(named=True)}
    short = [r for r, how in end_of.items() if how != "complete"]
    members: dict[str, set[int]] = {}
    for pg, rank in c.select("pg", "rank").drop_nulls().unique().iter_rows():
        members.setdefault(pg, set()).add(int(rank))
    everyone = set(proc_of)
    known = c.filter((pl.col("seq") >= 0) & pl.col("rank").is_not_null())
    expected = {pg: len(m) for pg, m in members.items()}
    seen = known.group_by("pg", "seq").agg(pl.col("rank").n_unique().alias("__n"), pl.col("group_size").max())
    seen = seen.with_columns(pl.max_horizontal(
        pl.col("pg").replace_strict(expected, default=0, return_dtype=pl.Int64),
        pl.when(pl.col("group_size") <= len(everyone)).then(pl.col("group_size")).otherwise(0),
    ).alias("__want"))  # fmt: skip
    partial = seen.filter(pl.col("__n") < pl.col("__want")).select("pg", "seq", "__want")
    if partial.height:  # a rank missing from a collective stopped before it (not a trace that began late)
        last = {(pg, r): s for pg, r, s in known.group_by("pg", "rank").agg(pl.col("seq").max()).iter_rows()}
        present = known.group_by("pg", "seq").agg(pl.col("rank").unique())
        stopped: list[tuple[str, int]] = []
        for pg, seq, want, ranks_in in partial.join(present, on=["pg", "seq"]).iter_rows():
            group = members.get(pg, set()) | (everyone if want >= len(everyone) else set())
            absent = group - set(ranks_in)
            if absent and all(last.get((pg, r), -1) < seq for r in absent):
                stopped.append((pg, seq))
        partial = pl.DataFrame({"pg": [p for p, _ in stopped], "seq": [s for _, s in stopped]},
                               schema={"pg": pl.String, "seq": pl.Int64})  # fmt: skip
    partial = partial.select("pg", "seq")
    pend = pl.concat([
        c.filter(pl.col("done_us").is_null() & pl.col("rank").is_in(short)),
        known.join(partial, on=["pg", "seq"]),
    ], how="vertical_relaxed")  # fmt: skip
    if pend.height == 0:
        return pl.DataFrame(schema=_HANG_SCHEMA)
    first = pend.sort("issue_us", "pg", "seq").unique("rank", keep="first", maintain_order=True).sort("rank")
    issued = c.select("rank", "pg", "seq").unique()
    rows = []
    named: set[tuple] = set()
    for w in first.iter_rows(named=True):
        rows.append({
            "rank": w["rank"], "state": "waiting", "op": w["op"], "pg": w["pg"], "seq": w["seq"],
            "since_us": w["issue_us"], "epoch": w["epoch"], "step": w["step"], "waits_for": None,
            "where": f"in {w['op']} (pg {w['pg']}, seq {w['seq']})", "file_end": end_of.get(w["rank"]),
        })  # fmt: skip
        size = w["group_size"]
        group = members.get(w["pg"], set()) | (everyone if size and size >= len(everyone) else set())
        have = set(issued.filter((pl.col("pg") == w["pg"]) & (pl.col("seq") == w["seq"])).get_column("rank").to_list())
        for r in sorted(group - have):
            if (r, w["pg"], w["seq"]) in named:
                continue
            named.add((r, w["pg"], w["seq"]))
            own = first.filter(pl.col("rank") == r)
            rows.append({
                "rank": r, "state": "never issued", "op": w["op"], "pg": w["pg"], "seq": w["seq"],
                "since_us": None, "epoch": None, "step": None, "waits_for": None,
                "where": _where_instead(proc_of.get(r), own.row(0, named=True) if own.height else None),
                "file_end": end_of.get(r, "no trace file"),
            })  # fmt: skip
    out = pl.DataFrame(rows, schema=_HANG_SCHEMA)
    # who the waiting ranks wait for: the ranks that never issued their collective
    never = out.filter(pl.col("state") == "never issued").group_by("pg", "seq").agg(
        pl.col("rank").sort().cast(pl.String).str.join(", ").alias("__w")
    )
    out = out.join(never, on=["pg", "seq"], how="left").with_columns(
        pl.when(pl.col("state") == "waiting").then(pl.col("__w")).otherwise(None).alias("waits_for")
    ).drop("__w")
    return out.select(list(_HANG_SCHEMA)).sort(["state", "rank"], descending=[True, False])


def _file_end(proc: dict) -> str:
    if proc.get("cut"):
        return f"cut by {proc['cut']}"
    return "complete" if proc.get("ended") else "no end record (killed or crashed)"


def _where_instead(proc: dict | None, own: dict | None) -> str:
    """Where a rank that never issued a collective was: its own pending collective, the regions open at
    the cut, else its last events."""
    if proc is None:
        return "no trace file for this rank"
    parts = []
    if own is not None:
        parts.append(f"waiting in {own['op']} (pg {own['pg']}, seq {own['seq']})")
    regions = _open_regions(proc.get("open"))
    if regions:
        parts.append(f"in {regions}")
    if not parts and proc.get("last_events"):
        parts.append(f"past its last events ({proc['last_events']})")
    text = ", ".join(parts) if parts else "nowhere the trace recorded"
    if proc.get("last_step") is not None:
        text += f" in step {proc['last_step']}"
    return text


def _open_regions(text: str | None) -> str | None:
    """The innermost region open at the cut on each thread that had one (the `cut` record's `open`)."""
    if not text:
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return text
    found: list[str] = []

    def walk(v) -> None:
        if isinstance(v, str):
            found.append(v)
        elif isinstance(v, list):
            if v and all(isinstance(x, str) for x in v):
                found.append(" > ".join(v))
            else:
                for x in v:
                    walk(x)
        elif isinstance(v, dict):
            for key in ("regions", "open", "names", "stack"):
                if key in v:
                    walk(v[key])
                    return
            for x in v.values():
                if isinstance(x, (list, str)):
                    walk(x)

    walk(value)
    return "; ".join(dict.fromkeys(x for x in found if x)) or None


def hang_lines(h: pl.DataFrame) -> list[str]:
    """One sentence per waiting collective: "rank 0 waits in all_reduce (pg 0, seq 41) since step 2; rank 1
    never issued it: it was in dataloader.next"."""
    if h.height == 0:
        return []
    lines = []
    waiting = h.filter(pl.col("state") == "waiting")
    for (pg, seq), g in waiting.group_by("pg", "seq", maintain_order=True):
        ranks = g.get_column("rank").to_list()
        w = g.row(0, named=True)
        since = f" since step {w['step']}" if w["step"] is not None else (
            f" since {w['since_us'] / 1e6:.3g} s" if w["since_us"] is not None else "")
        who = _ranks(ranks)
        text = f"{who} {'waits' if len(ranks) == 1 else 'wait'} in {w['op']} (pg {pg}, seq {seq}){since}"
        never = h.filter((pl.col("state") == "never issued") & (pl.col("pg") == pg) & (pl.col("seq") == seq))
        for r in never.iter_rows(named=True):
            text += f"; rank {r['rank']} never issued it: it was {r['where']}"
        if never.height == 0:
            text += "; every rank of its group issued it (stopped before it completed)"
        lines.append(text)
    return lines


def _ranks(ranks: Iterable[int]) -> str:
    rs = sorted(ranks)
    return f"rank {rs[0]}" if len(rs) == 1 else "ranks " + ", ".join(str(r) for r in rs)
