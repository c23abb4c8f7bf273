"""Basic blocks, dominators, loops and exception handlers of one code object."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from types import CodeType

from dynascope.decompiler.copies import CopyMatcher
from dynascope.decompiler.opcodes import (
    BRANCHING,
    CONDITIONAL_JUMPS,
    JUMP_OPS,
    NON_RAISING,
    TERMINATORS,
    Instr,
    canonical_instructions,
    exception_entries,
)


@dataclass(eq=False)
class Block:
    """A straight run of canonical instructions; only its last one may jump."""

    start: int
    instrs: list[Instr]
    handler: Block | None = None  # where an exception raised here goes
    handler_depth: int = 0
    handler_lasti: bool = False
    succs: list[Block] = field(default_factory=list)  # normal flow: [fallthrough, jump target]
    preds: list[Block] = field(default_factory=list)
    index: int = 0

    @property
    def last(self) -> Instr:
        return self.instrs[-1]  # never empty: blocks are cut at instructions (_add_block, the loop fold)

    @property
    def body(self) -> list[Instr]:
        """Instructions other than the final branch."""
        if self.last.name in BRANCHING:
            return self.instrs[:-1]
        return self.instrs

    def __repr__(self) -> str:
        return f"<Block {self.start}>"

    def __hash__(self) -> int:
        # by position, not identity: the structurer iterates sets of blocks, and an address-based
        # order made the decompiled text depend on memory layout (equality stays identity)
        return self.index


class ControlFlowGraph:
    """Blocks in offset order, normal-flow edges, exception handlers, and the analyses the
    structurer asks for (dominators, natural loops, post-dominators, merge points)."""

    def __init__(self, code: CodeType):
        self.code = code
        self.instrs = canonical_instructions(code)
        self._offsets = sorted({i.offset for i in self.instrs})
        for ins in self.instrs:
            if ins.target is not None:
                ins.target = self.snap(ins.target)
        self.entries = _merged([(self.snap(s), self.snap(e), self.snap(t), d, lasti)
                                for s, e, t, d, lasti in exception_entries(code)])
        self.blocks: list[Block] = []
        self.by_offset: dict[int, Block] = {}
        self._split()
        self._link()
        self.dominators = self._dominators()
        if self._fold_bottom_tests():
            self.dominators = self._dominators()
        self._pdom_cache: dict = {}
        self._rpo: dict | None = None
        self.copy_matcher = CopyMatcher(self.instrs)

    def snap(self, offset: int) -> int:
        """The first kept instruction at or after `offset` (jumps may target dropped NOPs)."""
        i = bisect.bisect_left(self._offsets, offset)
        return self._offsets[i] if i < len(self._offsets) else offset

    # ---- construction --------------------------------------------------------------------
    def _handler_at(self, offset: int):
        for start, end, target, depth, lasti in self.entries:
            if start <= offset < end:
                return target, depth, lasti
        return None

    def _split(self) -> None:
        leaders = {self.instrs[0].offset} if self.instrs else set()
        for i, ins in enumerate(self.instrs):
            if ins.target is not None:
                leaders.add(ins.target)
            if (ins.name in BRANCHING or ins.name in TERMINATORS) and i + 1 < len(self.instrs):
                leaders.add(self.instrs[i + 1].offset)
        leaders.update(target for _, _, target, _, _ in self.entries)  # range ends: where the handler changes
        current: list[Instr] = []
        previous_handler = object()
        for ins in self.instrs:
            handler = self._handler_at(ins.offset) if ins.name not in NON_RAISING else previous_handler
            if current and (ins.offset in leaders or handler != previous_handler) and ins.offset != current[-1].offset:
                self._add_block(current)
                current = []
            previous_handler = handler
            current.append(ins)
        if current:
            self._add_block(current)

    def _add_block(self, instrs: list[Instr]) -> None:
        block = Block(start=instrs[0].offset, instrs=instrs, index=len(self.blocks))
        self.blocks.append(block)
        for ins in instrs:
            self.by_offset.setdefault(ins.offset, block)

    def _link(self) -> None:
        for i, block in enumerate(self.blocks):
            following = self.blocks[i + 1] if i + 1 < len(self.blocks) else None
            last = block.last
            handler = self._handler_at(block.start)
            if handler is not None:
                block.handler = self.by_offset[handler[0]]
                block.handler_depth, block.handler_lasti = handler[1], handler[2]
            if last.name in TERMINATORS:
                continue
            if last.name in JUMP_OPS:
                assert last.target is not None  # jumps name their target
                block.succs = [self.by_offset[last.target]]
            elif last.name in CONDITIONAL_JUMPS or last.name in ("FOR_ITER", "SEND"):
                assert following is not None and last.target is not None  # a branch falls through or jumps
                block.succs = [following, self.by_offset[last.target]]
            elif following is not None:
                block.succs = [following]
        for block in self.blocks:
            for succ in block.succs:
                succ.preds.append(block)

    def _fold_bottom_tests(self) -> bool:
        """3.11+ compile `while c:` as a test `c` before the loop plus a copy of it at the bottom,
        and `continue` jumps to the top one: two loop headers for one loop.  Where the bottom copy
        matches the top test, it becomes a jump to the top test, leaving one loop."""
        changed = False
        for latch in self.blocks:
            header = self._bottom_test_target(latch)
            if header is None:
                continue
            guard = self._top_test(latch, header)
            if guard is None:
                continue
            size = len(guard.instrs)
            first = latch.instrs[-size]
            jump = Instr("JUMP", None, None, first.offset, guard.start, first.line, "(folded)")
            latch.instrs = [*latch.instrs[:-size], jump]
            for succ in latch.succs:
                succ.preds.remove(latch)
            latch.succs = [guard]
            guard.preds.append(latch)
            changed = True
        return changed

    def _bottom_test_target(self, latch: Block) -> Block | None:
        if len(latch.succs) != 2 or latch.last.name not in POP_JUMPS:
            return None
        headers = [succ for succ in map(_through_jump, latch.succs) if succ in self.dominators.get(latch, ())]
        # both, when the way out jumps straight to an enclosing loop's header: the innermost loops here
        return max(headers, key=lambda b: len(self.dominators[b]), default=None)

    def _top_test(self, latch: Block, header: Block) -> Block | None:
        entries = [p for p in header.preds if header not in self.dominators.get(p, ())]
        if len(entries) != 1:
            return None
        guard = entries[0]
        if not self.is_loop_header(guard):
            return None  # only `continue` makes the top test a jump target, and starts it a block
        size = len(guard.instrs)
        if (guard is latch or len(guard.succs) != 2 or guard.last.name not in POP_JUMPS
                or guard.handler is not latch.handler or len(latch.instrs) < size or header not in guard.succs):
            return None
        same_test = [(i.name, repr(i.argval)) for i in guard.instrs[:-1]] == \
                    [(i.name, repr(i.argval)) for i in latch.instrs[-size:-1]]
        if not same_test or _loops_when(guard, header) != _loops_when(latch, header):
            return None
        guard_exit = next(s for s in map(_through_jump, guard.succs) if s is not header)
        latch_exit = next(s for s in map(_through_jump, latch.succs) if s is not header)
        return guard if guard_exit is latch_exit or _same_exit(guard_exit, latch_exit) else None

    def all_succs(self, block: Block) -> list[Block]:
        """Normal and exceptional successors (for dominance)."""
        result = list(block.succs)
        if block.handler is not None:
            result.append(block.handler)
        return result

    # ---- analyses ------------------------------------------------------------------------
    def _dominators(self) -> dict[Block, set[Block]]:
        blocks = self.reachable()
        entry = self.blocks[0]
        dom = {b: set(blocks) for b in blocks}
        dom[entry] = {entry}
        preds: dict[Block, list[Block]] = {b: [] for b in blocks}
        for b in blocks:
            for s in self.all_succs(b):
                if s in preds:
                    preds[s].append(b)
        changed = True
        while changed:
            changed = False
            for b in blocks:
                if b is entry or not preds[b]:
                    continue
                new = set.intersection(*(dom[p] for p in preds[b])) | {b}
                if new != dom[b]:
                    dom[b] = new
                    changed = True
        return dom

    def reachable(self) -> list[Block]:
        seen: dict[Block, None] = {}
        todo = [self.blocks[0]]
        while todo:
            b = todo.pop()
            if b in seen:
                continue
            seen[b] = None
            todo.extend(self.all_succs(b))
        return sorted(seen, key=lambda b: b.index)

    def is_loop_header(self, block: Block) -> bool:
        return any(block in self.dominators.get(p, ()) for p in block.preds)

    def loop_body(self, header: Block) -> set[Block]:
        """Blocks of the natural loop: those that reach a back edge without passing the header."""
        body = {header}
        todo = [p for p in header.preds if header in self.dominators.get(p, ())]
        while todo:
            b = todo.pop()
            if b in body:
                continue
            body.add(b)
            todo.extend(b.preds)
        return body

    def post_dominator(self, block: Block, region: set[Block] | None, cut: Block | None = None) -> Block | None:
        """Immediate post-dominator of `block` inside `region`; leaving the region or reaching `cut`
        (a loop header: `continue`) counts as the exit.  None means only the exit post-dominates."""
        key = (block, frozenset(region) if region is not None else None, cut)
        if key not in self._pdom_cache:
            self._pdom_cache[key] = self._post_dominator(block, region, cut)
        return self._pdom_cache[key]

    def _post_dominator(self, block, region, cut):
        nodes = [b for b in self.reachable() if (region is None or b in region) and b is not cut]
        node_set = set(nodes)
        exits = self._can_exit(nodes, node_set)
        if block not in exits:
            return None  # only an endless loop (or an exception) leaves: nothing to merge at
        exit_ = None
        pdom: dict[Block, set] = {b: set(exits) | {exit_} for b in nodes if b in exits}
        changed = True
        while changed:
            changed = False
            for b in reversed(nodes):
                if b not in exits:
                    continue
                sets = [pdom[s] if s in node_set else {exit_} for s in b.succs if s not in node_set or s in exits]
                new = set.intersection(*(sets or [{exit_}])) | {b}
                if new != pdom[b]:
                    pdom[b] = new
                    changed = True
        strict = pdom[block] - {block, exit_}
        for candidate in sorted(strict, key=lambda b: b.index):
            if all(other is candidate or other in pdom[candidate] for other in strict):
                return candidate
        return None

    def _can_exit(self, nodes: list[Block], node_set: set[Block]) -> set[Block]:
        """Blocks with a normal-flow path that returns, raises or leaves the region."""
        result = {b for b in nodes if not b.succs or any(s not in node_set for s in b.succs)}
        changed = True
        while changed:
            changed = False
            for b in nodes:
                if b not in result and any(s in result for s in b.succs):
                    result.add(b)
                    changed = True
        return result

    def merge_point(self, block: Block, region: set[Block] | None, cut: Block | None) -> Block | None:
        """Where the arms of a branch meet again.  The post-dominator when there is one; when paths
        that return get in the way (`if a: if b: return`), the first block both arms reach."""
        merge = self.post_dominator(block, region, cut)
        if merge is not None:
            return merge
        reached = [self._reach(succ, region, cut) for succ in block.succs]
        common = set.intersection(*reached) if reached else set()
        if not common:
            return None
        order = self.reverse_postorder()
        return min(common, key=lambda b: order.get(b, len(order)))

    def _reach(self, start: Block, region, cut) -> set[Block]:
        seen: set[Block] = set()
        todo = [start]
        while todo:
            b = todo.pop()
            if b in seen or b is cut or (region is not None and b not in region):
                continue
            seen.add(b)
            todo.extend(b.succs)
        return seen

    def reverse_postorder(self) -> dict[Block, int]:
        if self._rpo is None:
            order: list[Block] = []
            seen: set[Block] = set()

            def visit(b: Block) -> None:
                seen.add(b)
                for s in b.succs:
                    if s not in seen:
                        visit(s)
                order.append(b)

            visit(self.blocks[0])
            self._rpo = {b: i for i, b in enumerate(reversed(order))}
        return self._rpo


POP_JUMPS = ("POP_JUMP_IF_FALSE", "POP_JUMP_IF_TRUE", "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE")


def _same_exit(a: Block, b: Block) -> bool:
    """Two copies of one small exit (CPython copies a `return` onto each path that reaches it)."""
    code = lambda block: [(i.name, repr(i.argval)) for i in block.instrs]  # noqa: E731
    return not a.succs and not b.succs and len(a.instrs) <= 4 and code(a) == code(b)


CANNOT_RAISE = {"POP_EXCEPT", "SWAP", "LOAD_CONST", "RETURN_VALUE", "JUMP"}


def plain_return(block: Block) -> list | None:
    """The instructions of a `return` of a constant or of a value already computed, which CPython
    leaves out of the try's exception-table range (nothing in it can raise) and copies onto the
    paths that reach it; inside an except clause, with the POP_EXCEPTs that leave it (which may
    start a block of their own)."""
    instrs: list = []
    for _ in range(4):
        if any(i.name not in CANNOT_RAISE for i in block.instrs):
            return None
        instrs += [i for i in block.instrs if i.name != "JUMP"]
        if not block.succs:
            return instrs if block.last.name == "RETURN_VALUE" else None
        if len(block.succs) != 1:
            return None
        block = block.succs[0]
    return None


def only_jumps(block: Block) -> bool:
    return len(block.instrs) == 1 and block.last.name == "JUMP"


def _through_jump(block: Block) -> Block:
    """Where a block that only jumps (3.12+ puts the loop's back jump in one) leads."""
    if only_jumps(block) and block.succs:
        return block.succs[0]
    return block


def _loops_when(block: Block, header: Block) -> tuple[str, bool]:
    """Which outcome of the block's test leads to `header`: ("truthy"|"none", value)."""
    taken = _through_jump(block.succs[1]) is header  # succs: [fallthrough, jump target]
    kind = block.last.name
    if kind == "POP_JUMP_IF_FALSE":
        return "truthy", not taken
    if kind == "POP_JUMP_IF_TRUE":
        return "truthy", taken
    if kind == "POP_JUMP_IF_NONE":
        return "none", taken
    return "none", not taken


def _merged(entries: list) -> list:
    """Exception-table entries with empty ranges dropped and neighbours with the same handler joined
    (instructions folded away, e.g. an `await` loop's YIELD_VALUE, leave such seams behind)."""
    result: list = []
    for start, end, target, depth, lasti in entries:
        if start >= end:
            continue
        if result and result[-1][1] == start and result[-1][2:] == (target, depth, lasti):
            result[-1] = (result[-1][0], end, target, depth, lasti)
        else:
            result.append((start, end, target, depth, lasti))
    return result
