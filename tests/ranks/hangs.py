"""What the files of a job stopped in the planted hang must say (ddp_train.py --hang 2:1): rank 1 never gets
its data at step 2, rank 0 goes on into step 2's collectives and waits there."""

from __future__ import annotations

import polars as pl

from dynascope.analyze.comm_job import hang_lines


def check_planted_hang(summary) -> None:
    """Who waits in which collective, since which step, and that rank 1 never issued it."""
    waiting = summary.hangs.filter(pl.col("state") == "waiting").row(0, named=True)
    assert (waiting["rank"], waiting["step"]) == (0, 2), summary.hangs
    assert waiting["op"] == "all_reduce" and waiting["waits_for"] == "1"
    never = summary.hangs.filter(pl.col("state") == "never issued").row(0, named=True)
    assert never["rank"] == 1 and never["seq"] == waiting["seq"]
    line = hang_lines(summary.hangs)[0]
    assert line.startswith(f"rank 0 waits in all_reduce (pg {waiting['pg']}, seq {waiting['seq']}) since step 2; "
                           "rank 1 never issued it: it was")  # fmt: skip
    assert "in step 2" in line
