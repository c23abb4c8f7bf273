"""What lives on the symbolic operand stack besides ordinary `ast.expr` nodes."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from types import CodeType
from typing import Any

from dynascope.errors import DynascopeError


class DecompileError(DynascopeError):
    """The decompiler met bytecode it cannot turn into equivalent Python; use decompile_or_dis."""


class Null:
    """The NULL that 3.11+ pushes below (or above) a callable."""

    def __repr__(self) -> str:
        return "NULL"


@dataclass(eq=False)
class Iter:
    """Result of GET_ITER: the iterable, rendered once in a `for` header."""

    iterable: ast.expr


@dataclass(eq=False)
class Delegate:
    """GET_YIELD_FROM_ITER / GET_AWAITABLE's result: what the next YIELD_FROM delegates to."""

    value: ast.expr
    kind: str  # "yield from" or "await"


@dataclass(eq=False)
class LoopValue:
    """The value FOR_ITER pushes; its first store(s) become the loop target."""

    iterable: ast.expr


@dataclass(eq=False)
class Unpacked:
    """Item `index` of an UNPACK_SEQUENCE/UNPACK_EX of `source`; stores fill `group.targets`."""

    group: UnpackGroup
    index: int


@dataclass(eq=False)
class UnpackGroup:
    source: Any
    count: int
    star_index: int | None = None
    targets: list = field(default_factory=list)
    parent: Unpacked | None = None
    stored_at: tuple | None = None  # (id of the statement list, its length) at the first store

    def __post_init__(self) -> None:
        self.targets = [None] * self.count


@dataclass(eq=False)
class SymList:
    """A list built on the stack whose contents are still known item by item (Dynamo's plumbing)."""

    items: list
    escaped: bool = False


@dataclass(eq=False)
class Accumulator:
    """The list/set/dict a comprehension appends to; `out[start:]` holds its loop statements."""

    kind: str  # "list", "set", "dict"
    out: list
    start: int


@dataclass(eq=False)
class SavedLocal:
    """LOAD_FAST_AND_CLEAR: an inlined comprehension saving the outer value of its variable."""

    name: str


@dataclass(eq=False)
class FunctionValue:
    """MAKE_FUNCTION's result: code plus the defaults, closure and annotations taken from the stack."""

    code: CodeType
    defaults: list = field(default_factory=list)
    kwdefaults: dict = field(default_factory=dict)
    annotations: Any = None
    decorators: list = field(default_factory=list)


@dataclass(eq=False)
class BuildClass:
    """LOAD_BUILD_CLASS's `__build_class__`, waiting for its call."""


@dataclass(eq=False)
class ClassValue:
    """A `class` statement's result: the class body's code, name, bases and keywords."""

    body: FunctionValue
    name: str
    bases: list
    keywords: list


@dataclass(eq=False)
class Inplace:
    """Result of an augmented operator, waiting for the store that makes it `target op= value`."""

    op: str
    target: ast.expr
    value: ast.expr


@dataclass(eq=False)
class ImportedModule:
    """IMPORT_NAME's result, kept symbolic so its store can read as an import statement."""

    name: str
    fromlist: Any
    level: int


@dataclass(eq=False)
class ImportedName:
    """IMPORT_FROM's result: `name` taken from `module`."""

    module: ImportedModule
    name: str


@dataclass(eq=False)
class WithExit:
    """The bound __exit__ (or __aexit__) that BEFORE_WITH leaves on the stack."""

    manager: ast.expr
    is_async: bool = False


@dataclass(eq=False)
class WithEnter:
    """What __enter__ returned; its store (if any) is the `as` target."""

    target: Any = None


@dataclass(eq=False)
class WithExitDone:
    """Result of calling the with-block's __exit__ on the normal path."""


@dataclass(eq=False)
class CaughtException:
    """The exception a handler is working on."""


@dataclass(eq=False)
class ExcInfo:
    """The saved previous exception PUSH_EXC_INFO stores below the current one."""


@dataclass(eq=False)
class CellRef:
    """LOAD_CLOSURE: the cell of a variable, not its value (closures; Dynamo passes cells around)."""

    name: str


@dataclass(eq=False)
class LastI:
    """The lasti integer pushed for cleanup handlers."""



NULL = Null()


def is_marker(value: Any) -> bool:
    return not isinstance(value, ast.AST)
