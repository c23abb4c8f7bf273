"""Turn the control-flow graph back into nested statements.

Branches are closed at their immediate post-dominator, loops are natural loops (back edges to a
dominating header), and `try`/`with` regions come from the exception table.  Values that stay on
the operand stack across a branch (Dynamo keeps several there) travel with each arm; where arms
meet with different values they become conditional expressions or temporaries.
"""

from __future__ import annotations

import ast

from dynascope.decompiler.cfg import Block, ControlFlowGraph, only_jumps, plain_return
from dynascope.decompiler.comprehension import from_statements
from dynascope.decompiler.executor import BlockExecutor, Frame
from dynascope.decompiler.nodes import const, name
from dynascope.decompiler.opcodes import CONDITIONAL_JUMPS as CONDITIONAL
from dynascope.decompiler.opcodes import FEATURES, Instr
from dynascope.decompiler.protected import ProtectedRegions
from dynascope.decompiler.regions import (
    ENDS,
    MAX_BLOCK_VISITS,
    NOT_EXPRESSIBLE,
    Loop,
    NotAnExpression,
    Region,
    Walked,
    copy_stack,
)
from dynascope.decompiler.values import Accumulator, DecompileError, Iter, LoopValue, Null, SymList


class Structurer(ProtectedRegions):
    """Walks the CFG from the entry block, emitting nested statements."""

    def __init__(self, cfg: ControlFlowGraph, frame: Frame):
        self.cfg = cfg
        self.frame = frame
        self.loops: list[Loop] = []
        self.active_handlers: list[Block] = []
        self.exception_names: set[str] = set()
        self.entering_loop = False  # a try/with that starts at the loop header being emitted
        self.steps = 0
        self.active_finally: list[Block] = []  # handlers of the try...finally statements being emitted
        self.protected: list[Region] = []  # regions of the try/with bodies being emitted, innermost last

    def function_body(self) -> list:
        walked = self.walk(self.cfg.blocks[0], [], Region())
        if walked.stack is not None:
            raise DecompileError("function body falls off its end")
        return walked.stmts

    def walk(self, block: Block | None, stack: list, region: Region, skip_until: int | None = None,
             entering_loop: bool = False) -> Walked:
        """Statements for the blocks from `block` until the region ends; `entering_loop` says
        `block` is the header of the loop being emitted (so reaching it is not a `continue`)."""
        out: list = []
        while block is not None:
            if block is region.stop and not entering_loop:
                return Walked(out, stack, block)
            through_finally = self.finally_exit(block, region) if skip_until is None else None
            if through_finally is None and skip_until is None:
                self.check_stays_inside(block, region)
            if isinstance(through_finally, ast.stmt):
                out.append(through_finally)
                return Walked(out, None)
            if through_finally is not None:  # a return: what follows the copy (the value is already computed)
                block, skip_until = through_finally
                if skip_until is None:
                    raise DecompileError("a return after an inlined finally body starts its own block")
                continue
            if region.leaves is not None and region.early_exit is not None and region.leaves(block) \
                    and region.early_exit(block) is not None:
                return Walked(out, stack, block)  # return/break/continue through a finally or __exit__
            jump = self.loop_jump(block, entering_loop)
            if jump is not None:
                return self.finish_loop_jump(out, stack, block, jump, skip_until)
            if region.leaves is not None and region.leaves(block):
                if self.is_continue_trampoline(block):
                    out.append(ast.Continue())
                    return Walked(out, None)
                return Walked(out, stack, self.beyond_jumps(block))
            if not entering_loop and self.starts_loop(block) and not self.protects_whole_loop(block):
                if region.expression_only:
                    raise NotAnExpression
                block, stack = self.emit_loop(block, stack, out, region)
                if stack is None:
                    return Walked(out, None)
                continue
            entering, entering_loop = entering_loop, False
            handler = self.new_handler(block)
            if handler is not None:
                if region.expression_only:
                    raise NotAnExpression
                block, stack, skip_until = self.emit_protected(block, handler, stack, out, region, entering)
                if stack is None:
                    return Walked(out, None)
                continue
            self.count_step()
            executor = BlockExecutor(self.frame, stack, out)
            instrs = [i for i in block.body if skip_until is None or i.offset >= skip_until]
            skip_until = None
            executor.run(self.drop_exception_name_cleanup(instrs))
            if region.expression_only and out:
                raise NotAnExpression
            self.note_loop_target(executor)
            if executor.returned:
                return Walked(out, None)
            last = block.last
            if region.handler_exit and executor.left_handler and last.name not in CONDITIONAL:
                following = block.succs[0] if block.succs else None
                if self.returns_from_outer_handler(following, executor):
                    return Walked(out, None)
                return Walked(out, stack, following)
            if last.name == "JUMP":
                block = block.succs[0]
            elif last.name == "FOR_ITER":  # a `for` whose body never loops back (it always returns)
                block, stack = self.emit_once_for(block, executor.stack, out, region)
                if stack is None:
                    return Walked(out, None)
            elif last.name == "SEND":
                raise DecompileError(f"{last.name} outside a recognised loop at offset {last.offset}")
            elif len(block.succs) == 2:
                block, stack = self.emit_branch(block, executor, out, region)
                if stack is None:
                    return Walked(out, None)
                continue
            elif block.succs:
                block = block.succs[0]
            else:
                raise DecompileError(f"block at offset {block.start} has no successor")
        return Walked(out, stack, None)

    def returns_from_outer_handler(self, following: Block | None, executor: BlockExecutor) -> bool:
        """An except clause inside another whose `return` leaves both: after its own POP_EXCEPT,
        the outer clause's POP_EXCEPT and the return (3.13: in a block of their own).  That is the
        clause's `return`, not code after its try statement."""
        instrs = plain_return(following) if following is not None else None
        if instrs is None or not any(i.name == "POP_EXCEPT" for i in instrs):
            return False
        executor.run(instrs)
        return executor.returned

    def count_step(self) -> None:
        """Blocks may be emitted more than once (duplicated exits); stop before that blows up."""
        self.steps += 1
        if self.steps > MAX_BLOCK_VISITS:
            raise DecompileError(f"gave up after visiting {MAX_BLOCK_VISITS} blocks (control flow too tangled)")

    def drop_exception_name_cleanup(self, instrs: list[Instr]) -> list[Instr]:
        """`except E as e` ends with `e = None; del e`, which the syntax implies; drop it."""
        result: list[Instr] = []
        i = 0
        while i < len(instrs):
            window = instrs[i:i + 3]
            if (len(window) == 3 and window[0].name == "LOAD_CONST" and window[0].argval is None
                    and window[1].name in ("STORE_FAST", "STORE_NAME", "STORE_DEREF")
                    and window[2].name in ("DELETE_FAST", "DELETE_NAME", "DELETE_DEREF")
                    and window[1].argval == window[2].argval and window[1].argval in self.exception_names):
                i += 3
                continue
            result.append(instrs[i])
            i += 1
        return result

    def protects_whole_loop(self, header: Block) -> bool:
        """Does a try/with starting at this loop header cover every way back to it (`try: while
        True: ...`, not `while True: try: ...`)?  Then the statement comes first, the loop inside."""
        handler = self.new_handler(header)
        if handler is None:
            return False
        latches = [p for p in header.preds if header in self.cfg.dominators.get(p, ())]
        return all(handler in self.handler_chain(latch) for latch in latches)

    def starts_loop(self, block: Block) -> bool:
        return self.cfg.is_loop_header(block) and all(loop.header is not block for loop in self.loops)

    def loop_jump(self, block: Block, entering: bool):
        if not self.loops:
            return None
        loop = self.loops[-1]
        if block is loop.header and not entering:
            return "continue"
        if loop.body is not None and block not in loop.body:
            return "exit"
        for outer in self.loops[:-1]:
            if block is outer.header:
                if self.is_break_then_continue(block):
                    return "break"
                real = [loop for loop in self.loops if loop.body is not None]
                if outer in real[:-1]:
                    return "continue outer"
                raise DecompileError("a jump back to the loop being left")
        return None

    def is_break_then_continue(self, outer_header: Block) -> bool:
        """A jump from inside a `for` loop straight to the enclosing loop's header is `break` when
        the loop, run out, also goes straight there (CPython threads break -> continue jumps)."""
        inner = [loop for loop in self.loops if loop.body is not None]
        if len(inner) < 2 or inner[-2].header is not outer_header or inner[-1].exhausted is None:
            return False
        block, seen = inner[-1].exhausted, set()
        while block is not outer_header:
            if block in seen or len(block.succs) != 1 or any(i.name not in ("POP_TOP", "JUMP") for i in block.instrs):
                return False
            seen.add(block)
            block = block.succs[0]
        return True

    def finish_loop_jump(self, out, stack, block, jump, skip_until) -> Walked:
        loop = self.loops[-1]
        if jump == "continue":
            out.append(ast.Continue())
            return Walked(out, None)
        if jump == "break":
            out.append(ast.Break())
            return Walked(out, None)
        if jump == "continue outer":
            out.extend([_assign_flag(self.continue_flag_for(block), True), ast.Break()])
            return Walked(out, None)
        if block is loop.follow:
            loop.break_stack = loop.break_stack or copy_stack(stack)
            out.append(ast.Break())
            return Walked(out, None)
        # code on the way out of the loop (a `return`, or statements before `break`)
        exit_loop = Loop(header=loop.header, body=None, follow=loop.follow)
        self.loops.append(exit_loop)
        try:
            walked = self.walk(block, stack, Region(stop=loop.follow), skip_until=skip_until)
        finally:
            self.loops.pop()
        out.extend(walked.stmts)
        if walked.stack is not None:
            if walked.exit is not loop.follow:
                raise DecompileError("a way out of a loop that stops before where the loop goes on")
            loop.break_stack = loop.break_stack or copy_stack(walked.stack)  # (a `for`'s else is skipped)
            out.append(ast.Break())
        return Walked(out, None)

    def beyond_jumps(self, block: Block) -> Block:
        """Where a block outside the try/with being emitted leads when it only jumps (3.13 leaves the
        jump ending a try body's branch out of the exception-table range, a block of its own); the
        block itself when it is where a loop being emitted goes on."""
        if any(block is loop.follow or block is loop.header for loop in self.loops):
            return block
        return _through_jumps(block)

    def continue_flag_for(self, header: Block) -> str:
        """Python has no `continue` of an outer loop: set a flag and break; after the loop inside
        the one to continue, `if flag: continue`; after each loop between, `if flag: break`."""
        real = [loop for loop in self.loops if loop.body is not None]
        target = next(i for i, loop in enumerate(real) if loop.header is header)
        child = real[target + 1]
        child.continue_flag = child.continue_flag or self.frame.new_temp().replace("__t", "__continue_")
        for between in real[target + 2:]:
            if child.continue_flag not in between.break_flags:
                between.break_flags.append(child.continue_flag)
        return child.continue_flag

    def is_continue_trampoline(self, block: Block) -> bool:
        """A lone jump back to the innermost loop's header (a `continue` leaving a try block)."""
        return (bool(self.loops) and self.loops[-1].body is not None and not block.body
                and block.last.name == "JUMP" and block.succs[0] is self.loops[-1].header)

    def note_loop_target(self, executor: BlockExecutor) -> None:
        if executor.loop_target is not None:
            for loop in reversed(self.loops):
                if loop.target is None and loop.body is not None:
                    loop.target = executor.loop_target
                    return
            raise DecompileError("loop value stored outside its loop")

    def enclosing_region(self):
        """(blocks, header) of the innermost loop, for post-dominators that stop at its edges."""
        if self.loops and self.loops[-1].body is not None:
            return self.loops[-1].body, self.loops[-1].header
        return None, None

    def emit_loop(self, header: Block, stack: list, out: list, region: Region):
        body = self.cfg.loop_body(header)
        enclosing, cut = self.enclosing_region()
        follow = self.cfg.post_dominator(header, enclosing, cut)
        if follow is not None and (follow in body or self.starts_with_finally_copy(follow, header)):
            follow = None  # (a break through try...finally: after the loop is what follows the copy)
        first = header.instrs[0]
        if follow is None and cut is not None and first.name == "FOR_ITER":
            follow = self.break_target(header, body, enclosing, cut)
        if follow is None and first.name == "FOR_ITER":
            follow = self.break_destination(header, body)
        if follow is None and first.name != "FOR_ITER" and self.protected:
            follow = self.way_out_of_protected(body)
        if follow is None and first.name != "FOR_ITER":
            follow = self.only_way_out(header, body)
        if first.name == "FOR_ITER" and len(header.instrs) == 1:
            return self.emit_for(header, body, follow, stack, out, region)
        loop = Loop(header=header, body=body, follow=follow)
        self.loops.append(loop)
        try:
            walked = self.walk(header, copy_stack(stack), Region(), entering_loop=True)
        finally:
            self.loops.pop()
        _append_loop(out, ast.While(test=const(True), body=_strip_trailing_continue(walked.stmts) or [ast.Pass()],
                                    orelse=[]), loop)
        if follow is None:
            return None, None
        return follow, stack

    def break_target(self, header: Block, body: set, enclosing: set, cut: Block) -> Block | None:
        """Where a nested `for` loop's breaks go when its `else` continues the enclosing loop (so no
        block post-dominates it there): the one way out, besides running out, that goes on in the
        enclosing loop."""
        exits = {s for b in body for s in b.succs if s not in body and s is not header.succs[1]}
        going_on = [s for s in exits if s is cut or any(cut in b.succs for b in self.cfg._reach(s, enclosing, cut))]
        if len(going_on) != 1 or self.starts_with_finally_copy(going_on[0], header):
            return None  # (a break through try...finally: the copy is not where the loop goes on)
        return going_on[0]

    def break_destination(self, header: Block, body: set) -> Block | None:
        """Where a `for` loop goes on when no block post-dominates it (running out raises or
        returns: `for ...: if c: break` + `else: raise`): the one block its breaks jump to, each
        after its own statements (which then read as code before `break`)."""
        destinations = set()
        for way_out in (s for b in body for s in b.succs if s not in body and s is not header.succs[1]):
            destination = self.end_of_break_path(way_out)
            if destination is None:
                return None
            if destination is not ENDS:
                destinations.add(destination)
        if len(destinations) != 1:
            return None
        (destination,) = destinations
        if destination in body or self.starts_with_finally_copy(destination, header) \
                or any(destination is loop.header for loop in self.loops):
            return None
        # running out must end (raise, return) or go through it too, never on to what follows it
        if self.cfg._reach(header.succs[1], None, destination) & self.cfg._reach(destination, None, None):
            return None
        return destination

    def end_of_break_path(self, block: Block):
        """Where the straight path from `block` jumps to, or the end of the except clause it falls
        into (3.13 puts the clause's POP_EXCEPT in a block of its own); ENDS when it returns or
        raises first."""
        for step in range(4):
            if step and block.instrs[0].name == "POP_EXCEPT":
                return block
            if not block.succs:
                return ENDS
            if block.last.name == "JUMP":
                return self.beyond_jumps(block.succs[0])
            if len(block.succs) != 1:
                return None
            block = block.succs[0]
        return None

    def way_out_of_protected(self, body: set) -> Block | None:
        """A loop ending its try/with body that also returns or raises from inside has no
        post-dominator; when it leaves the try/with one way only, that is where it goes on."""
        inner = self.protected[-1]
        assert inner.leaves is not None  # a try/with body's region says where the statement ends
        leaving = {s for b in body for s in b.succs if s not in body and inner.leaves(s)}
        return leaving.pop() if len(leaving) == 1 else None

    def only_way_out(self, header: Block, body: set) -> Block | None:
        """Where a `while True` loop whose every pass tests its exit goes on (its header has no
        post-dominator outside it): the one block its breaks lead to, through blocks that only jump,
        not counting exits that end the function right away (a `return` block).  It must be in the
        same try/with as the header (not an except clause's body ending in `break`).  None when a
        test leaves the loop (it may leave values on the stack: `while 0 <= i < n`)."""
        exits = set()
        for block, way_out in ((b, s) for b in body for s in b.succs if s not in body and s.succs):
            if block.last.name != "JUMP" and not only_jumps(way_out):
                return None
            exits.add(self.beyond_jumps(way_out))
        if len(exits) != 1:
            return None
        (follow,) = exits
        if (follow in body or self.starts_with_finally_copy(follow, header)
                or any(follow is loop.header for loop in self.loops)):
            return None
        return follow if self.handler_chain(follow) == self.handler_chain(header) else None

    def emit_once_for(self, header: Block, stack: list, out: list, region: Region):
        body_start = header.succs[0]
        body = {b for b in self.cfg.reachable() if body_start in self.cfg.dominators.get(b, ())}
        enclosing, cut = self.enclosing_region()
        follow = self.cfg.post_dominator(header, enclosing, cut)
        return self.emit_for(header, body, None if follow in body else follow, stack, out, region)

    def emit_for(self, header, body, follow, stack, out, region):
        iterator = stack[-1] if stack else None
        if not isinstance(iterator, Iter):
            raise DecompileError("FOR_ITER without GET_ITER")
        body_start, exhausted = header.succs
        loop = Loop(header=header, body=body, follow=follow, exhausted=exhausted)
        self.loops.append(loop)
        try:
            walked = self.walk(body_start, [*copy_stack(stack), LoopValue(iterator.iterable)], Region())
        finally:
            self.loops.pop()
        if loop.target is None:
            raise DecompileError("for loop without a target")
        after_stack = stack[:-1] if FEATURES["for_iter_pops"] else [*stack, Null()]
        kind = ast.AsyncFor if header.instrs[-1].argval == "async" else ast.For
        statement = kind(target=loop.target, iter=iterator.iterable,
                            body=_strip_trailing_continue(walked.stmts) or [ast.Pass()], orelse=[], lineno=0)
        if follow is exhausted:
            _append_loop(out, statement, loop)
            return exhausted, after_stack
        # the code after the loop is still inside the try/with the loop is in
        inside = {"leaves": region.leaves, "early_exit": region.early_exit}
        if follow is None:  # nothing after the loop but code that ends the function (or its try/with)
            _append_loop(out, statement, loop)
            tail = self.walk(exhausted, after_stack, Region(**inside))
            out.extend(tail.stmts)
            return (None, None) if tail.stack is None else (tail.exit, tail.stack)
        tail = self.walk(exhausted, after_stack, Region(stop=follow, **inside))
        if tail.stack is None and loop.break_stack is not None:  # only a `break` gets past the `else`
            statement.orelse = tail.stmts
            _append_loop(out, statement, loop)
            return follow, loop.break_stack
        if tail.stack is None:
            _append_loop(out, statement, loop)
            out.extend(tail.stmts)
            return None, None
        statement.orelse = tail.stmts
        _append_loop(out, statement, loop)
        return follow, tail.stack

    def branch_of(self, block: Block, executor: BlockExecutor):
        """(test, true block, true stack, false block, false stack) of a conditional block."""
        last = block.last
        fall, jump = block.succs
        stack = executor.stack
        if last.name in ("JUMP_IF_FALSE_OR_POP", "JUMP_IF_TRUE_OR_POP"):
            test = executor.expr(stack[-1])
            popped = copy_stack(stack[:-1])
            kept = copy_stack(stack)
            if last.name == "JUMP_IF_FALSE_OR_POP":
                return test, fall, popped, jump, kept
            return test, jump, kept, fall, popped
        value = executor.expr(executor.pop())
        if any(v is value for v in stack):  # 3.12+ `a and b`: COPY, test, POP_TOP of the tested copy
            value.evaluated_by_test = True  # type: ignore[attr-defined]  # a marker attribute
        if last.name == "POP_JUMP_IF_FALSE":
            return value, fall, copy_stack(stack), jump, copy_stack(stack)
        if last.name == "POP_JUMP_IF_TRUE":
            return value, jump, copy_stack(stack), fall, copy_stack(stack)
        if last.name in ("POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE"):
            op = ast.Is() if last.name == "POP_JUMP_IF_NONE" else ast.IsNot()
            test = ast.Compare(left=value, ops=[op], comparators=[const(None)])
            return test, jump, copy_stack(stack), fall, copy_stack(stack)
        raise DecompileError(f"unsupported branch {last.original}")

    def emit_branch(self, block: Block, executor: BlockExecutor, out: list, region: Region):
        test, t_block, t_stack, f_block, f_stack = self.branch_of(block, executor)
        test, t_block, f_block = self.collapse_conditions(block, test, t_block, f_block, t_stack)
        enclosing, cut = self.enclosing_region()
        merge = self.cfg.merge_point(block, enclosing, cut)
        if merge is not None and region.leaves is not None and region.leaves(merge):
            merge = self.beyond_jumps(merge)  # (where the arms' walks say they leave the try/with body)
        combined = self.try_expression(test, t_block, t_stack, f_block, f_stack, merge)
        if combined is not None:
            return merge, combined
        if region.expression_only:  # an `if` statement: the enclosing attempt fails anyway, fail fast
            raise NotAnExpression
        executor.flush(set(), True)
        test = executor.use_saved(test)
        self._resync(executor.stack, t_stack, f_stack)
        # (no merge point when an arm raises or returns: the other still stops where this walk stops)
        inner = Region(stop=merge if merge is not None else region.stop, leaves=region.leaves,
                       early_exit=region.early_exit)
        then = self.walk(t_block, t_stack, inner)
        other = self.walk(f_block, f_stack, inner)
        for arm in (then, other):
            if arm.stack is not None and arm.exit is not merge and region.early_exit is not None:
                assert arm.exit is not None  # (None failed on an attribute inside early_exit before this assert)
                resume = region.early_exit(arm.exit)
                if resume is not None and resume is not NOT_EXPRESSIBLE:
                    self.finish_early_exit(arm, merge, resume)
        if (region.leaves is not None and then.stack is not None and other.stack is not None
                and then.exit is not other.exit):
            self.return_inside(region, then, other)
        leaving = {arm.exit for arm in (then, other) if arm.stack is not None and arm.exit is not merge}
        if len(leaving) == 2 and self.same_exit_code(*leaving):
            kept = min((b for b in leaving if b is not None), key=lambda b: b.start)  # both are blocks here
            for arm in (then, other):
                if arm.exit in leaving:
                    arm.exit = kept
            leaving = {kept}
        if len(leaving) == 1 and all(arm.stack is None or arm.exit in leaving for arm in (then, other)):
            merge = leaving.pop()  # the branch ends where its try/with block ends
        elif leaving:
            raise DecompileError("a branch leaves its try/with block another way than its end")
        stack = self.merge_stacks(then, other)
        out.append(ast.If(test=test, body=then.stmts or [ast.Pass()], orelse=other.stmts))
        if then.stack is None and other.stack is None:
            return None, None
        return merge, stack

    def return_inside(self, region: Region, *arms: Walked) -> None:
        """Arms of a branch in a try/with body that go on at different places: one that goes to a
        plain `return` outside the body (see plain_return) returns inside the body instead."""
        assert region.leaves is not None  # (the caller's check)
        for arm in arms:
            instrs = plain_return(arm.exit) if arm.exit is not None and region.leaves(arm.exit) else None
            if instrs is not None:
                assert arm.stack is not None  # both arms go on (the caller's check)
                executor = BlockExecutor(self.frame, arm.stack, arm.stmts)
                executor.run(instrs)
                if not executor.returned:
                    raise DecompileError("a return block that does not return")
                arm.stack, arm.exit = None, None

    def same_exit_code(self, a: Block | None, b: Block | None) -> bool:
        """Two copies of one exit (CPython duplicates small `return` blocks onto each path)."""
        if a is None or b is None or a is b:
            return a is b
        if a.succs or b.succs or a.last.name not in ("RETURN_VALUE", "RAISE_VARARGS"):
            return False
        key = lambda block: [(i.name, repr(i.argval)) for i in block.instrs]  # noqa: E731
        return key(a) == key(b) and len(a.instrs) <= 12

    def finish_early_exit(self, arm: Walked, merge, resume) -> None:
        """`resume` (from Region.early_exit): a `break`/`continue` statement, or (block, offset)
        where the code after the inlined finally / __exit__ copy goes on to a `return`."""
        if isinstance(resume, ast.stmt):
            arm.stmts.append(resume)
            arm.stack, arm.exit = None, None
            return
        resume_block, skip = resume
        assert arm.stack is not None  # the arm goes on (emit_branch's check)
        rest = self.walk(resume_block, arm.stack, Region(stop=merge), skip_until=skip)
        if rest.stack is not None:
            raise DecompileError("a branch leaves its with/finally block and carries on")
        arm.stmts.extend(rest.stmts)
        arm.stack, arm.exit = None, None

    def _resync(self, flushed: list, *arms: list) -> None:
        """After flushing the pre-branch stack to temporaries, make each arm's copy use them too."""
        for arm in arms:
            for i in range(min(len(flushed), len(arm))):
                if isinstance(flushed[i], ast.Name) and not isinstance(arm[i], (SymList, ast.Name)):
                    arm[i] = flushed[i]

    def merge_stacks(self, a: Walked, b: Walked) -> list | None:
        if a.stack is None:
            return b.stack
        if b.stack is None:
            return a.stack
        if len(a.stack) != len(b.stack):
            raise DecompileError("branches meet with different stack depths")
        merged = []
        for x, y in zip(a.stack, b.stack, strict=False):
            if x is y or _same_value(x, y):
                merged.append(x)
                continue
            temp = self.frame.new_temp()
            a.stmts.append(ast.Assign(targets=[name(temp, ast.Store())], value=_arm_value(x), lineno=0))
            b.stmts.append(ast.Assign(targets=[name(temp, ast.Store())], value=_arm_value(y), lineno=0))
            merged.append(name(temp))
        return merged

    def try_expression(self, test, t_block, t_stack, f_block, f_stack, merge):
        """`a if c else b`, `a and b`, `a < b < c`: both arms only compute values, then meet."""
        if merge is None:
            return None
        # 3.12+ `a or b` keeps a copy of `a` (the test) and pops it on the `b` side, `a < f() < c`
        # keeps f() and pops it where `a < f()` is false: nothing to evaluate
        evaluated = {id(test)}
        if isinstance(test, ast.Compare):
            evaluated |= {id(v) for v in [test.left, *test.comparators]}
        self.frame.already_evaluated.update(evaluated)
        try:
            then = self.walk(t_block, copy_stack(t_stack), Region(stop=merge, expression_only=True))
            other = self.walk(f_block, copy_stack(f_stack), Region(stop=merge, expression_only=True))
        except (NotAnExpression, DecompileError):
            return None
        finally:
            self.frame.already_evaluated.difference_update(evaluated)
        if then.stack is None or other.stack is None or then.exit is not merge or other.exit is not merge:
            return None
        if then.stmts or other.stmts:  # a loop or try inside an arm: not an expression after all
            return None
        if len(then.stack) != len(other.stack):
            return None
        merged = []
        differs = False
        for x, y in zip(then.stack, other.stack, strict=False):
            if x is y or _same_value(x, y):
                merged.append(x)
            else:
                differs = True
                merged.append(_conditional(test, _as_expr(x), _as_expr(y)))
        if not differs:
            return None
        return merged

    def collapse_conditions(self, block, test, t_block, f_block, stack):
        """Fold `if a and b` / `if a or b` chains (blocks that only test) into one condition."""
        absorbed = {block}
        changed = True
        while changed:
            changed = False
            for side in ("true", "false"):
                inner = t_block if side == "true" else f_block
                parsed = self.pure_condition(inner, stack, absorbed)
                if parsed is None:
                    continue
                test2, t2, f2 = parsed
                if side == "true" and f2 is f_block:
                    test, t_block = ast.BoolOp(op=ast.And(), values=[test, test2]), t2
                elif side == "false" and t2 is t_block:
                    test, f_block = ast.BoolOp(op=ast.Or(), values=[test, test2]), f2
                else:
                    continue
                absorbed.add(inner)
                changed = True
                break
        return test, t_block, f_block

    def pure_condition(self, block, stack, absorbed):
        if any(p not in absorbed for p in block.preds):
            return None
        if block.last.name not in ("POP_JUMP_IF_FALSE", "POP_JUMP_IF_TRUE", "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE"):
            return None
        if self.starts_loop(block) or self.new_handler(block) is not None:
            return None
        out: list = []
        executor = BlockExecutor(self.frame, copy_stack(stack), out)
        try:
            executor.run(block.body)
        except DecompileError:
            return None
        if out or len(executor.stack) != len(stack) + 1:
            return None
        if any(a is not b for a, b in zip(executor.stack, stack, strict=False)):
            return None
        test, t_block, _, f_block, _ = self.branch_of(block, executor)
        return test, t_block, f_block


def _through_jumps(block: Block) -> Block:
    """Where blocks that only jump lead (3.13 leaves the jump at the end of a try body's branch
    out of the exception-table range, so it starts a block of its own)."""
    seen = set()
    while only_jumps(block) and block.succs and block not in seen:
        seen.add(block)
        block = block.succs[0]
    return block


def _same_value(a, b) -> bool:
    if isinstance(a, ast.AST) and isinstance(b, ast.AST):
        return ast.dump(a) == ast.dump(b) and isinstance(a, (ast.Name, ast.Constant))
    return False


def _as_expr(value):
    if isinstance(value, ast.AST):
        return value
    if isinstance(value, SymList):
        return ast.List(elts=[_as_expr(v) for v in value.items], ctx=ast.Load())
    raise DecompileError(f"{type(value).__name__} at a merge point")


def _arm_value(value):
    """A value one arm leaves for the merge point; a comprehension 3.12+ inlined into the arm
    becomes its expression (its loop statements are the last ones of the arm)."""
    if isinstance(value, Accumulator):
        stmts = value.out[value.start:]
        del value.out[value.start:]
        return from_statements(stmts, value.kind)
    return _as_expr(value)


def _conditional(test, body, orelse):
    if orelse is test:
        return _bool_op(ast.And, test, body)
    if body is test:
        return _bool_op(ast.Or, test, orelse)
    return ast.IfExp(test=test, body=body, orelse=orelse)


def _bool_op(kind, left, right):
    if (kind is ast.And and isinstance(left, ast.Compare) and isinstance(right, ast.Compare)
            and right.left is left.comparators[-1]):
        return ast.Compare(left=left.left, ops=left.ops + right.ops, comparators=left.comparators + right.comparators)
    if isinstance(left, ast.BoolOp) and isinstance(left.op, kind):
        return ast.BoolOp(op=kind(), values=[*left.values, right])
    return ast.BoolOp(op=kind(), values=[left, right])


def _append_loop(out: list, statement, loop: Loop) -> None:
    """The loop statement, inside `flag = False` ... `if flag: continue` when a path out of it
    continues the enclosing loop, followed by `if flag: break` for each flag that continues a loop
    further out."""
    if loop.continue_flag is not None:
        out.append(_assign_flag(loop.continue_flag, False))
    out.append(statement)
    out.extend(ast.If(test=name(flag), body=[ast.Break()], orelse=[]) for flag in loop.break_flags)
    if loop.continue_flag is not None:
        out.append(ast.If(test=name(loop.continue_flag), body=[ast.Continue()], orelse=[]))


def _assign_flag(flag: str, value: bool) -> ast.stmt:
    return ast.Assign(targets=[name(flag, ast.Store())], value=const(value), lineno=0)


def _strip_trailing_continue(stmts: list) -> list:
    if stmts and isinstance(stmts[-1], ast.Continue):
        return stmts[:-1]
    return stmts
