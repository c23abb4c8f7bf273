"""What one run of a program under one stage gives: the compiled graphs with their real inputs, and the
values the run is judged by (outputs, gradients)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from dynascope.debug.bisect.stages import Stage, compiler


@dataclass
class CapturedGraph:
    """One graph Dynamo handed the stage: a copy as it was handed over, and the inputs of its first call."""

    index: int
    name: str
    compile_id: str | None
    gm: Any
    example_inputs: list
    inputs: list | None = None  # the real inputs of its first call (None when it never ran)
    error: BaseException | None = None  # what the stage's compile raised for it

    @property
    def best_inputs(self) -> list:
        return self.inputs if self.inputs is not None else self.example_inputs


class Recorder:
    """A backend that records each graph and its first real inputs, then compiles it with the stage."""

    def __init__(self, stage: Stage):
        self.stage = stage
        self.graphs: list[CapturedGraph] = []
        self.__name__ = f"dynascope_bisect_{stage.name}"

    def __call__(self, gm: Any, example_inputs: list) -> Any:
        from dynascope import _torch
        from dynascope.capture.attribution import graph_label

        entry = CapturedGraph(len(self.graphs), graph_label(gm),
                              _torch.current_compile_id(), copy.deepcopy(gm), snapshot(example_inputs))  # fmt: skip
        self.graphs.append(entry)
        try:
            compiled = compiler(self.stage)(gm, example_inputs)
        except Exception as exc:
            entry.error = exc
            raise

        def call(*args: Any) -> Any:
            if entry.inputs is None:
                entry.inputs = snapshot(args)
            return compiled(*args)

        return call


def snapshot(args: Any) -> list:
    """Copies of a call's arguments that later runs cannot change (requires_grad and parameters kept)."""
    from dynascope.debug.bisect.execute import fresh

    return [fresh(value) for value in args]


@dataclass
class RunRecord:
    """One run of the program: the values it is judged by, what it raised, the graphs it compiled."""

    values: dict[str, Any] = field(default_factory=dict)
    error: BaseException | None = None
    graphs: list[CapturedGraph] = field(default_factory=list)
    seconds: float = 0.0
    output: str = ""  # what the program printed (scripts)
