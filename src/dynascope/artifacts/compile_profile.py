"""The compile profile, as plain data: what `dynascope compile-profile --json` and `dynascope run
--compile-profile` write to compile_profile.json (docs/debug.md documents the JSON), with its save.
Built by debug/compile_profile.py; read back as plain data by artifacts.run_dir.load_compile_profile."""

from __future__ import annotations

import marshal
import os
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from dynascope.errors import ConfigError

SCHEMA = "dynascope.compile_profile/1"


@dataclass
class FunctionCost:
    function: str
    file: str
    line: int  # the def line
    inclusive_s: float  # tracing this function and everything it called
    self_s: float  # less the user functions it called (torch internals it called stay in)
    traced: int  # how many times Dynamo started tracing it (inlined calls, restarts, recompiles)
    instructions: int  # bytecode instructions Dynamo traced in it


@dataclass
class LineCost:
    function: str
    file: str
    line: int
    code: str | None
    inclusive_s: float
    self_s: float
    instructions: int


@dataclass
class FrameCost:
    """One compile of one frame (a compile id), split into phases. None: torch logged no such phase."""

    compile_id: str
    function: str | None
    file: str | None
    line: int | None
    total_s: float | None
    dynamo_s: float | None  # all of Dynamo: tracing (restarts included), guards, bytecode generation
    tracing_s: float | None  # Dynamo tracing the frame's bytecode, restarts included (our step hook)
    guards_s: float | None  # building the guards (our hook)
    restart_s: float | None  # tracing thrown away when Dynamo restarted the frame (graph breaks; torch's metric)
    backend_s: float | None  # the whole backend call: AOTAutograd, the compiler, inductor's code generation
    aot_s: float | None  # AOTAutograd's own share of it, where inductor ran (backend_s less inductor_s)
    inductor_s: float | None
    backward_s: float | None = None  # compiling the backward graph, which happens at the first backward
    cache: dict[str, int] = field(default_factory=dict)  # fx_graph / aot_autograd cache hits and misses
    status: str = "ok"


@dataclass
class BreakCost:
    """A graph break, charged to its line. cost_s: the compile time of the code after the break,
    compiled as a frame of its own (the resume function's first compile, its backward graph included),
    plus the tracing Dynamo threw away restarting the frame that broke."""

    reason: str
    function: str | None
    file: str | None
    line: int | None
    code: str | None
    count: int
    cost_s: float
    compile_ids: list[str] = field(default_factory=list)


@dataclass
class RecompileCost:
    """A recompile, charged to the line that introduced the guard that failed; cost_s: its compile
    (its backward graph's included)."""

    function: str | None
    file: str | None
    line: int | None
    code: str | None
    compile_id: str | None
    reason: str
    cost_s: float
    line_from: str  # "guard": the guard's user line (torch >= 2.13); "first use": the first line that reads
    # the guarded variable (older torch, whose guards carry no line); "def": the function's first line


@dataclass
class CompileProfile:
    schema: str = SCHEMA
    torch_version: str | None = None
    script: str | None = None
    compile_s: float = 0.0  # all compiles' total time, backward graphs' compiles included
    tracing_s: float = 0.0  # Dynamo's tracing of user lines (what the functions and lines add up to)
    functions: list[FunctionCost] = field(default_factory=list)  # ranked by self_s
    lines: list[LineCost] = field(default_factory=list)  # ranked by self_s
    frames: list[FrameCost] = field(default_factory=list)  # in compile order
    graph_breaks: list[BreakCost] = field(default_factory=list)  # ranked by cost_s
    recompiles: list[RecompileCost] = field(default_factory=list)  # ranked by cost_s
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    _pstats: dict[Any, Any] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("_pstats", None)
        return out

    def write_pstats(self, path: str | os.PathLike[str]) -> str:
        """Write the per-function profile in cProfile's format: `python -m pstats FILE`, snakeviz FILE."""
        with open(path, "wb") as fh:
            marshal.dump(self._pstats, fh)
        return os.fspath(path)




def save_compile_profile(result: CompileProfile, path: str) -> None:
    """Write the profile as JSON to `path`, its folder made if needed; a path that cannot be written is a
    one-line error."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
        with open(path, "wb") as out:
            out.write(orjson.dumps(result.to_dict(), option=orjson.OPT_INDENT_2))
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from exc
