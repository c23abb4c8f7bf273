"""What the opcode mixins (ops_*.py) use of BlockExecutor, declared in one place for the type
checker: the frame, the symbolic stack, the statement list and the stack helpers.

`Frame` lives here (executor.py re-exports it) so that the mixins can name it without importing
executor.py, which imports them.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Set
from types import CodeType
from typing import TYPE_CHECKING, Any

from dynascope.decompiler.values import Accumulator, ClassValue, FunctionValue, SymList

# A nested code object rendered where it is used (function.render_nested): a def or class statement,
# or a lambda or comprehension expression, as `how` (a name, "<lambda>" or the comprehension's Iter) says.
RenderFunction = Callable[[FunctionValue | ClassValue, Any], Any]


class Frame:
    """Code-object facts every block needs: names, kinds of variables, nested function rendering."""

    def __init__(self, code: CodeType, render_function: RenderFunction):
        self.code = code
        self.render_function = render_function
        self.temp_count = 0
        self.position = 0  # counts pushed expressions: the order the original evaluated them in
        self.globals_declared: set[str] = set()
        # the next empty BUILD_LIST/SET/MAP starts a comprehension (set for comprehension code,
        # and by LOAD_FAST_AND_CLEAR where 3.12+ inlines comprehensions)
        self.accumulator_pending = code.co_name in ("<listcomp>", "<setcomp>", "<dictcomp>")
        self.nonlocals_declared: set[str] = set()
        self.already_evaluated: set[int] = set()  # ids of branch tests whose leftover copy POP_TOP drops

    def next_position(self) -> int:
        self.position += 1
        return self.position

    def new_temp(self) -> str:
        self.temp_count += 1
        return f"__t{self.temp_count}"


class ExecutorBase:
    """Base of the ops_* mixins.  At run time an empty class: BlockExecutor sets these attributes
    and defines these methods (and ContainerOps the symbolic-list ones); declaring them here lets
    each mixin be type-checked on its own."""

    frame: Frame
    stack: list[Any]
    out: list[ast.stmt]
    kwnames: tuple[Any, ...]

    if TYPE_CHECKING:
        def push(self, value: Any) -> None: ...
        def pop(self) -> Any: ...
        def popn(self, n: int) -> list[Any]: ...
        def expr(self, value: Any) -> ast.expr: ...
        def emit(self, stmt: ast.stmt, writes: Set[str] = ..., side_effects: bool = ...) -> None: ...
        def flush(self, writes: Set[str] = ..., side_effects: bool = ...) -> None: ...
        def comprehension_of(self, acc: Accumulator) -> ast.expr: ...
        def symlist_get(self, lst: SymList, key: Any) -> Any: ...
