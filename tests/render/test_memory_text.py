"""The knobs an out-of-memory ending gets (render/memory_text.py), from the tables alone: each applies only
where the run's figures support it."""

import polars as pl

from dynascope.analyze.memory import with_eager_peaks
from dynascope.render.memory_text import knobs, memory_line, peaks_vs_eager_line

GRAPH_COLUMNS = {"compile_id": pl.String, "graph": pl.String, "phase": pl.String, "saved_bytes": pl.Int64,
                 "symbolic": pl.Boolean}  # fmt: skip


class Tables:
    """What the knobs read of a Summary: its tables by name."""

    def __init__(self, **tables: pl.DataFrame) -> None:
        self.tables = tables

    def table(self, name: str) -> pl.DataFrame:
        return self.tables.get(name, pl.DataFrame())


def _summary(graphs: list[tuple], layers: list[tuple], ops: list[tuple] = ()) -> Tables:
    return Tables(
        memory_by_graph=pl.DataFrame(graphs, schema=GRAPH_COLUMNS, orient="row"),
        memory_by_layer=pl.DataFrame(layers, schema={"layer": pl.String, "saved_bytes": pl.Int64}, orient="row"),
        by_op=pl.DataFrame(list(ops), schema={"name": pl.String, "count": pl.Int64}, orient="row"),
    )


OOM = {"graph": "__compiled_fn_3", "phase": "forward"}


def test_the_running_graphs_saved_bytes_and_dynamic_shapes_where_it_was_symbolic():
    summary = _summary(
        [("0/0", "__compiled_fn_1", "forward", 1000, False), ("1/0", "__compiled_fn_3", "forward", 5_000_000, True),
         ("1/0", "__compiled_fn_3", "backward", None, True)],
        [("blocks.1", 4_000_000), ("blocks.0", 1_001_000)],
    )  # fmt: skip
    said = knobs(summary, OOM)
    assert said[0].startswith("activation memory: __compiled_fn_3's forward keeps 5 MB for the backward; most in "
                              "blocks.1 (4 MB)")  # fmt: skip
    assert "(5 MB saved at this batch)" in said[1]
    assert said[2].startswith("dynamic shapes: 1 graph(s) compiled with symbolic sizes")
    assert not [k for k in said if k.startswith("CUDA graphs")]
    assert memory_line(summary) == ("Memory: the compiled graphs keep 5 MB over 2 graphs for the backward "
                                    "(most in blocks.1: 4 MB)")  # fmt: skip


def test_cuda_graphs_where_replays_ran_and_nothing_saved_says_where_else_to_look():
    replays = _summary([("0/0", "__compiled_fn_1", "forward", 0, False)], [], [("cudagraph_replay", 40)])
    assert [k.split(":")[0] for k in knobs(replays, OOM)] == ["CUDA graphs"]
    nothing = _summary([], [])
    (only,) = knobs(nothing, {"graph": None, "phase": None})
    assert only.startswith("no compiled graph saved anything for the backward")


STEPS = {"step": pl.Int64, "peak_max": pl.Int64, "peak_at": pl.String}


def test_step_peaks_against_eager_apart_from_the_first_step_that_compiles():
    compiled = pl.DataFrame([(0, 900_000_000, "compiling 0/0"), (1, 510_000_000, "g"), (2, 520_000_000, "g")],
                            schema=STEPS, orient="row")  # fmt: skip
    eager = pl.DataFrame([(0, 500_000_000, "x"), (1, 530_000_000, "x"), (2, 500_000_000, "x")], schema=STEPS,
                         orient="row")  # fmt: skip
    steps = with_eager_peaks(compiled, eager)
    assert steps["eager_peak"].to_list() == [500_000_000, 530_000_000, 500_000_000]  # each step beside its own
    line = peaks_vs_eager_line(Tables(memory_by_step=steps))
    assert line == ("Peak memory against eager: compiled 520 MB, eager 530 MB (10 MB less) at the highest step after "
                    "the first; step 0, where the compiled run compiles: compiled 900 MB, eager 500 MB (400 MB more)")
    assert peaks_vs_eager_line(Tables(memory_by_step=compiled)) is None  # no eager run: nothing said
    assert with_eager_peaks(compiled, eager[:0]).equals(compiled)  # an eager run without samples adds nothing
