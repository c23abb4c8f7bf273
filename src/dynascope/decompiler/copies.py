"""Where an inlined copy of a `finally` body ends.

CPython compiles a `finally` body twice or more: once as the exception handler (ending in RERAISE)
and once more on each normal way out of the try (falling through, `return`, `break`, `continue`),
followed by what that way out does next.  The copies are the same code, but the optimiser lays them
out differently: it copies small exit blocks (the RERAISE, a `return x`) onto each branch that
reaches them and threads jumps to jumps.  So a copy is found by walking the handler's body and the
candidate side by side, branch by branch: where the handler reaches its RERAISE, the candidate has
reached the code after its copy.
"""

from __future__ import annotations

from dynascope.decompiler.opcodes import CONDITIONAL_JUMPS, Instr

MAX_PAIRS = 5_000
OPPOSITE_JUMPS = {
    "POP_JUMP_IF_FALSE": "POP_JUMP_IF_TRUE", "POP_JUMP_IF_TRUE": "POP_JUMP_IF_FALSE",
    "POP_JUMP_IF_NONE": "POP_JUMP_IF_NOT_NONE", "POP_JUMP_IF_NOT_NONE": "POP_JUMP_IF_NONE",
}
ENDS_PATH = ("RETURN_VALUE", "RAISE_VARARGS", "RERAISE")


class CopyMatcher:
    """Side-by-side walks over one code object's canonical instructions (`instrs`, in order)."""

    def __init__(self, instrs: list[Instr]):
        self.instrs = instrs
        self.position: dict[int, int] = {}
        for i, ins in enumerate(instrs):
            self.position.setdefault(ins.offset, i)

    def resumes(self, original: int, candidate: int) -> set[int] | None:
        """Positions where the copy starting at position `candidate` goes on, one for each path on
        which the body starting at position `original` reaches its RERAISE (empty when every path
        returns or raises); None when the candidate is not a copy of that body."""
        todo, seen, found = [(original, candidate)], set(), set()
        while todo:
            pair = todo.pop()
            if pair in seen:
                continue
            seen.add(pair)
            if len(seen) > MAX_PAIRS:
                return None
            following = self.step(*pair)
            if following is None:
                return None
            if isinstance(following, int):
                found.add(following)
                continue
            todo.extend(following)
        return found

    def step(self, i: int, j: int):
        """The pairs that follow (i, j); the candidate's position where the original re-raises; None
        where they differ."""
        if i >= len(self.instrs) or j >= len(self.instrs):
            return None
        a, b = self.instrs[i], self.instrs[j]
        if a.name == "RERAISE":
            return j
        if a.name == "JUMP" and b.name != "JUMP":
            return [(self.at(a.target), j)]
        if b.name == "JUMP" and a.name != "JUMP":
            return [(i, self.at(b.target))]
        if a.name == "JUMP":
            return [(self.at(a.target), self.at(b.target))]
        if a.name in CONDITIONAL_JUMPS or b.name in CONDITIONAL_JUMPS:
            return self.branch_pairs(i, j)
        if a.name != b.name or (a.target is None) != (b.target is None) or _operand(a) != _operand(b):
            return None
        if a.name in ENDS_PATH:
            return []
        if a.target is not None:  # FOR_ITER, SEND: both ways
            return [(i + 1, j + 1), (self.at(a.target), self.at(b.target))]
        return [(i + 1, j + 1)]

    def branch_pairs(self, i: int, j: int):
        a, b = self.instrs[i], self.instrs[j]
        if a.name == b.name:
            return [(i + 1, j + 1), (self.at(a.target), self.at(b.target))]
        if OPPOSITE_JUMPS.get(a.name) == b.name:  # the optimiser swapped the arms
            return [(i + 1, self.at(b.target)), (self.at(a.target), j + 1)]
        return None

    def at(self, offset: int | None) -> int:
        if offset is None:
            return len(self.instrs)
        return self.position.get(offset, len(self.instrs))

    def through_jumps(self, j: int) -> int:
        """Where a chain of unconditional jumps starting at position `j` leads."""
        seen = set()
        while j < len(self.instrs) and self.instrs[j].name == "JUMP" and j not in seen:
            seen.add(j)
            j = self.at(self.instrs[j].target)
        return j


def _operand(ins: Instr) -> str:
    """What must be equal in two copies of an instruction: its argument, unless that is where it jumps."""
    return "" if ins.target is not None and isinstance(ins.argval, int) else repr(ins.argval)
