"""Divergence between ranks (analyze/ranks.py): from the explanations and traces alone, the first thing one
rank did differently: another collective (operation, bytes, or none) at a group's sequence number, a
recompile at another step, another graph break, other graphs; and whether it is a hang risk."""

from __future__ import annotations

import warnings

import polars as pl
from support import step_trace as st
from test_ranks_steps import ranked

from dynascope.analyze import ranks as R
from dynascope.analyze.pipeline import summarize_files
from dynascope.artifacts.explanation import Report
from dynascope.render.terminal import summary_text


def comm_trace(rank: int, ops: list[tuple[str, int]], pid: int) -> st.Trace:
    """A rank of 3 steps; after each step's optimizer step it issues the collectives `ops` (operation,
    bytes) in group "0", each as an issue marker then its complete event (docs/trace-format.md)."""
    tr = ranked(st.Trace(pid), rank)
    loop = st.Loop(tr)
    seq = 0
    for k in range(3):
        loop.iteration(lead=0 if k == 0 else 5, compile_us=500 if k == 0 else 0)
        for op, nbytes in ops[k * 2 : k * 2 + 2]:
            args = {"pg": "0", "seq": seq, "bytes": nbytes, "group_size": 2, "source": "explicit", "async": 0,
                    "itid": pid}  # fmt: skip
            tr.event(op, "comm", loop.t - 10, 0, {**args, "state": "issued"})
            tr.event(op, "comm", loop.t - 10, 8, {**args, "state": "done"})
            seq += 1
    tr.end(loop.t + 10)
    return tr


def job(tmp_path, ops0, ops1):
    paths = [comm_trace(0, ops0, 700).write(tmp_path / "t-rank0-700.pfw"),
             comm_trace(1, ops1, 701).write(tmp_path / "t-rank1-701.pfw")]  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return summarize_files([str(p) for p in paths])


SAME = [("all_reduce", 4096)] * 6


def test_ranks_that_issue_the_same_collectives_do_not_diverge(tmp_path):
    s = job(tmp_path, SAME, SAME)
    assert s.divergence.height == 0
    assert "diverge" not in summary_text(s, width=120)


def test_another_collective_at_the_same_sequence_number_is_the_first_divergence(tmp_path):
    other = [*SAME[:3], ("broadcast", 4096), *SAME[4:]]  # step 1's second collective
    s = job(tmp_path, SAME, other)
    first = s.divergence.row(0, named=True)
    assert first["kind"] == "collective" and first["at"] == "0#3" and first["step"] == 1
    assert first["hang_risk"] is True
    assert "rank 0 issued all_reduce (4,096 bytes)" in first["detail"]
    assert "rank 1 issued broadcast (4,096 bytes)" in first["detail"]
    text = summary_text(s, width=160)
    assert text.index("Ranks diverge (hang risk): collective 3 of group 0") < text.index("Steps of the job")


def test_other_bytes_and_a_collective_never_issued(tmp_path):
    s = job(tmp_path, SAME, [*SAME[:2], ("all_reduce", 2048), *SAME[3:]])
    first = s.divergence.row(0, named=True)
    assert first["at"] == "0#2" and "2,048 bytes" in first["detail"]
    s = job(tmp_path, SAME, SAME[:5])  # rank 1 never issues the last one: the others wait for it
    first = s.divergence.row(0, named=True)
    assert first["at"] == "0#5" and first["ranks"] == "1" and "never did" in first["detail"]
    assert first["step"] == 2 and first["hang_risk"]


def _expl(recompiles=(), breaks=(), times=(("0/0", 5),)):
    """A rank's explanation, as analyze takes it (the typed Report), from explanation.json's shape."""
    return Report.from_dict({"recompiles": list(recompiles), "graph_breaks": list(breaks),
                             "compile_times": [{"compile_id": c, "function": "f", "graph_op_count": n} for c, n in times]})  # fmt: skip


def _rank_steps(rows):
    return pl.DataFrame(rows, schema={"rank": pl.Int64, "epoch": pl.Int64, "step": pl.Int64,
                                      "compile_ids": pl.List(pl.String)}, orient="row")  # fmt: skip


NO_COMM = pl.DataFrame(schema={"rank": pl.Int64, "pg": pl.String, "seq": pl.Int64, "op": pl.String,
                               "bytes": pl.Int64, "step": pl.Int64, "n": pl.Int64})  # fmt: skip
RC = {"function": "f", "file": "/a/train.py", "line": 7, "compile_id": "0/1", "reason": "tensor 'x' size mismatch"}


def test_a_recompile_at_another_step_on_each_rank():
    steps = _rank_steps([(0, None, 2, ["0/1"]), (1, None, 4, ["0/1"])])
    d = R.divergence(steps, {0: _expl([RC], times=[("0/0", 5)]), 1: _expl([RC], times=[("0/0", 5)])}, NO_COMM,
                     [0, 1])  # fmt: skip
    first = d.row(0, named=True)
    assert first["kind"] == "recompile" and first["step"] == 2 and first["ranks"] == "0"
    assert "at other steps" in first["detail"]
    # the same recompile at the same step on every rank is no divergence
    same = _rank_steps([(0, None, 2, ["0/1"]), (1, None, 2, ["0/1"])])
    assert R.divergence(same, {0: _expl([RC]), 1: _expl([RC])}, NO_COMM, [0, 1]).height == 0


def test_a_graph_break_on_one_rank_and_other_graphs():
    brk = {"reason": "data-dependent branch", "file": "/a/train.py", "line": 9, "compile_ids": ["1/0"], "count": 1}
    steps = _rank_steps([(0, None, 0, ["0/0"]), (1, None, 0, ["0/0"]), (1, None, 1, ["1/0"])])
    d = R.divergence(steps, {0: _expl(), 1: _expl(breaks=[brk], times=[("0/0", 5), ("1/0", 3)])}, NO_COMM, [0, 1])
    kinds = d.get_column("kind").to_list()
    assert kinds == ["graph break", "graphs"]
    b = d.row(0, named=True)
    assert b["ranks"] == "1" and b["source"] == "train.py:9" and b["step"] == 1 and not b["hang_risk"]
    assert b["detail"] == "rank 1 took a graph break at step 1 that rank 0 did not: data-dependent branch"
    g = d.row(1, named=True)
    assert g["at"] == "1/0" and g["detail"] == "rank 1 compiled 1/0, rank 0 did not"


def test_one_rank_is_no_job():
    assert R.divergence(_rank_steps([]), {0: _expl([RC])}, NO_COMM, [0]).height == 0
