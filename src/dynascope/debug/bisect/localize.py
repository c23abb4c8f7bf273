"""From a graph that a stage gets wrong to the first op it gets wrong.

An accuracy failure is first looked for in one run: a copy of the graph that returns every
intermediate value, compiled by the stage and compared node by node with eager. When that copy agrees
(the failure needs a fusion that returning the intermediates prevents), or the failure is in the
backward pass, the search bisects over prefixes of the graph (compile the graph up to node k, compare
its value and gradients). An exception is bisected over prefixes too: the first prefix that raises the
same error ends at the op that causes it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dynascope.capture.attribution import module_of, target_text, user_line
from dynascope.debug.bisect import graphs
from dynascope.debug.bisect.compare import Mismatch, compare
from dynascope.debug.bisect.execute import Outcome, differs, run, same_error
from dynascope.debug.bisect.stages import Stage


@dataclass
class Op:
    """The op a stage gets wrong, where it is in the user's code, and by how much."""

    node: str
    target: str
    layer: str = ""
    module_type: str = ""
    source: str = ""  # "model.py:12"
    code: str = ""  # the source line's text
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    rtol: float | None = None
    atol: float | None = None
    where: str = ""  # "forward" or "backward": which pass disagrees

    @staticmethod
    def of(node: Any, mismatch: Mismatch | None = None, where: str = "") -> Op:
        layer, module_type = module_of(node)
        file, line, code = user_line(node)
        op = Op(node.name, target_text(node), layer, module_type, f"{file.rsplit('/', 1)[-1]}:{line}" if file else "",
                code, where=where)  # fmt: skip
        if mismatch is not None and mismatch.what == "values":
            op.max_abs_err, op.max_rel_err = mismatch.max_abs_err, mismatch.max_rel_err
            op.rtol, op.atol = mismatch.rtol, mismatch.atol
        return op


@dataclass
class GraphVerdict:
    """How one captured graph fares under a stage, compared with eager on its recorded inputs."""

    eager: Outcome
    staged: Outcome
    mismatch: Mismatch | None = None
    compiles: int = 1

    @property
    def bad(self) -> bool:
        return self.staged.failed or self.mismatch is not None


@dataclass
class Search:
    """Counts what a search cost."""

    compiles: int = 0
    steps: list[str] = field(default_factory=list)


def judge(gm: Any, inputs: list, stage: Stage) -> GraphVerdict:
    eager = run(gm, inputs)
    staged = run(gm, inputs, stage)
    if eager.failed:  # the graph fails eagerly too: nothing the stage did
        return GraphVerdict(eager, staged)
    return GraphVerdict(eager, staged, None if staged.failed else differs(eager, staged))


def find_op(gm: Any, inputs: list, stage: Stage, verdict: GraphVerdict, search: Search) -> Op | None:
    """The first op of `gm` that the stage gets wrong (raises on, or computes differently), or None."""
    nodes = graphs.computing_nodes(gm)
    if not nodes:
        return None
    by_name = {node.name: node for node in gm.graph.nodes}
    if verdict.staged.failed:
        error = verdict.staged.error
        assert error is not None

        def raises(k: int) -> bool:
            search.compiles += 1
            return same_error(error, run(graphs.returning(gm, [nodes[k].name]), inputs, stage).error)

        k = _first_true(len(nodes), raises)
        return None if k is None else Op.of(by_name[nodes[k].name], where="compile or run")
    if verdict.mismatch is not None and not verdict.mismatch.path.startswith("grad"):
        op = _all_intermediates(gm, inputs, stage, nodes, search)
        if op is not None:
            return op

    def wrong(k: int) -> bool:
        search.compiles += 1
        prefix = graphs.returning(gm, [nodes[k].name])
        return differs(run(prefix, inputs), run(prefix, inputs, stage)) is not None

    k = _first_true(len(nodes), wrong)
    if k is None:
        return None
    prefix = graphs.returning(gm, [nodes[k].name])
    expected, actual = run(prefix, inputs), run(prefix, inputs, stage)
    mismatch = differs(expected, actual)
    where = "backward" if mismatch is not None and mismatch.path.startswith("grad") else "forward"
    return Op.of(by_name[nodes[k].name], mismatch, where)


def _all_intermediates(gm: Any, inputs: list, stage: Stage, nodes: list, search: Search) -> Op | None:
    every = graphs.returning(gm, [node.name for node in nodes])
    search.compiles += 1
    expected, actual = run(every, inputs, backward=False), run(every, inputs, stage, backward=False)
    if expected.failed or actual.failed:
        return None
    for node, a, b in zip(nodes, expected.outputs, actual.outputs, strict=True):
        mismatch = compare(a, b, f"output of {node.name}")
        if mismatch is not None:
            return Op.of(node, mismatch, "forward")
    return None


def _first_true(n: int, predicate: Callable[[int], bool]) -> int | None:
    """The smallest k in [0, n) with predicate(k), for a predicate that stays true once it is (a
    prefix that contains the culprit fails); None when even the whole range passes."""
    if not predicate(n - 1):
        return None
    lo, hi = 0, n - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if predicate(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo
