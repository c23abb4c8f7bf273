"""What a structuring walk carries: loops, regions, results."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dynascope.decompiler.cfg import Block
from dynascope.decompiler.values import SymList

MAX_BLOCK_VISITS = 20_000
# Region.early_exit's answer for a path out of try...finally it cannot express: the walk must stop
# there (walking on would run the inlined copy of the finally body as if it were plain code)
NOT_EXPRESSIBLE = "not expressible"
# where an inlined finally body is followed by nothing: every path through it returns or raises
ENDS = "ends"


@dataclass
class Loop:
    header: Block
    body: set[Block] | None  # None: an exit path, where every block counts as inside
    follow: Block | None
    target: Any = None
    exhausted: Block | None = None  # a `for` loop's exit when its iterator runs out
    continue_flag: str | None = None  # set where a path out of this loop continues the enclosing one
    break_flags: list = field(default_factory=list)  # flags of paths out of it that continue a loop further out
    break_stack: list | None = None  # the stack a `break` leaves at `follow`


@dataclass
class Region:
    """Where a walk stops: at `stop`, or at a block `leaves(block)` says is outside (try bodies)."""

    stop: Block | None = None
    leaves: Callable[[Block], bool] | None = None
    expression_only: bool = False
    handler_exit: bool = False  # an except clause: stop after POP_EXCEPT where it rejoins
    # inside `with`/`try...finally`: a `return` inlines the __exit__ call / finally body before
    # RETURN_VALUE.  Given such a block, where the return resumes after the inlined copy (None
    # when the block is not one).
    early_exit: Callable[[Block], Any] | None = None


@dataclass
class Walked:
    stmts: list
    stack: list | None  # None when every path ended (return, raise, break, continue)
    exit: Block | None = None


class NotAnExpression(Exception):
    """An arm tried in expression mode emitted a statement."""


def copy_stack(stack: list) -> list:
    """Copy the mutable markers (lists Dynamo builds) so each arm changes its own; keep aliasing."""
    memo: dict[int, Any] = {}

    def copy(value):
        if isinstance(value, SymList):
            if id(value) not in memo:
                memo[id(value)] = SymList(list(value.items), value.escaped)
                memo[id(value)].items = [copy(v) for v in value.items]
            return memo[id(value)]
        return value

    return [copy(v) for v in stack]
