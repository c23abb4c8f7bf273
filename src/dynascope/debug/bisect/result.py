"""What `dynascope bisect` / `dynascope.bisect` found, as a dataclass and as JSON (docs/debug.md)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from dynascope.debug.bisect.compare import TOLERANCES
from dynascope.debug.bisect.localize import Op


@dataclass
class StageResult:
    stage: str
    status: str  # "ok", "exception", "accuracy"
    seconds: float = 0.0
    graphs: int = 0  # graphs the stage compiled
    detail: str = ""  # the mismatch or the exception, in one line


@dataclass
class BisectResult:
    """The first stage that raises or changes results, what that points to, and the op responsible."""

    first_bad_stage: str | None = None
    kind: str | None = None  # "exception" or "accuracy"
    stack_layer: str = ""  # the part of torch's stack the first bad stage points to
    next_step: str = ""
    error: str = ""  # the exception, first lines
    error_source: str = ""  # "model.py:12": the user line the exception came from, when known
    graph: str | None = None  # the compiled graph responsible
    compile_id: str | None = None
    graph_size: int | None = None  # its computing nodes
    op: Op | None = None
    repro: str | None = None  # the repro directory
    repro_size: int | None = None  # computing nodes of the shrunk repro graph
    inductor_subsystem: str | None = None  # the inductor pass or subsystem that, switched off, fixes it
    stages: list[StageResult] = field(default_factory=list)
    compiles: int = 0  # compilations the whole search made
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    tolerances: dict[str, tuple[float, float]] = field(default_factory=lambda: dict(TOLERANCES))

    @property
    def exit_code(self) -> int:
        return 0 if self.first_bad_stage is None else 1

    def to_dict(self) -> dict[str, Any]:
        """The JSON of `--json`: the op's fields (`target`, `node`, `layer`, ...) at the top level."""
        out = asdict(self)
        op = out.pop("op") or dict.fromkeys(Op.__dataclass_fields__)
        out.update(op)
        out["tolerances"] = {dtype: {"rtol": r, "atol": a} for dtype, (r, a) in self.tolerances.items()}
        return out
