"""`try`/`except`/`finally` and `with`: regions recovered from the exception table.

A handler whose code starts with PUSH_EXC_INFO is one the user wrote; the others (re-raising
cleanups, `except ... as e` name cleanup, inlined-comprehension restores) are implied by the syntax
and never become statements.  `finally` bodies and `__exit__` calls are compiled twice (normal path
and exception path): the handler's copy is the one shown, the inline copy is skipped.
"""

from __future__ import annotations

import ast
import sys
from typing import TYPE_CHECKING, Any

from dynascope.decompiler.cfg import Block, ControlFlowGraph, only_jumps, plain_return
from dynascope.decompiler.executor import BlockExecutor
from dynascope.decompiler.machine import Frame
from dynascope.decompiler.nodes import same_scope_nodes
from dynascope.decompiler.opcodes import FEATURES, Instr
from dynascope.decompiler.regions import ENDS, NOT_EXPRESSIBLE, Loop, Region, Walked, copy_stack
from dynascope.decompiler.values import CaughtException, DecompileError, ExcInfo, LastI, WithEnter, WithExit


class ProtectedRegions:
    """Mixed into Structurer: uses its walk(), loops and frame."""

    # Structurer's state and methods this mixin uses (set and defined in structure.py)
    cfg: ControlFlowGraph
    frame: Frame
    loops: list[Loop]
    active_handlers: list[Block]
    active_finally: list[Block]
    protected: list[Region]
    exception_names: set[str]

    if TYPE_CHECKING:
        def walk(self, block: Block | None, stack: list, region: Region, skip_until: int | None = None,
                 entering_loop: bool = False) -> Walked: ...
        def same_exit_code(self, a: Block | None, b: Block | None) -> bool: ...
        def finish_early_exit(self, arm: Walked, merge: Any, resume: Any) -> None: ...
        def beyond_jumps(self, block: Block) -> Block: ...

    def new_handler(self, block: Block) -> Block | None:
        """The outermost try/with handler protecting `block` that no enclosing statement covers."""
        chain = self.handler_chain(block)
        for i, handler in enumerate(chain):
            if handler in self.active_handlers:
                chain = chain[:i]
                break
        real = [h for h in chain if h.instrs and h.instrs[0].name == "PUSH_EXC_INFO"]
        return real[-1] if real else None

    def handler_chain(self, block: Block) -> list[Block]:
        chain = []
        handler = block.handler
        while handler is not None and handler not in chain:
            chain.append(handler)
            handler = handler.handler
        return chain

    def emit_protected(self, block, handler, stack, out, region, entering_loop=False):
        self.entering_loop = entering_loop
        names = [i.name for i in handler.instrs[:3]]
        if "WITH_EXCEPT_START" in names:
            return self.emit_with(block, handler, stack, out, region)
        return self.emit_try(block, handler, stack, out, region)

    def protected_body(self, block, handler, stack, early_exit=None, rebound=frozenset()) -> Walked:
        """The statements a try/with protects.  Values still on the stack at its end were computed
        inside, so they are saved there; `rebound` names (assigned by a finally) are saved too."""
        self.active_handlers.append(handler)
        region = Region(leaves=lambda b: handler not in self.handler_chain(b), early_exit=early_exit)
        self.protected.append(region)
        entering, self.entering_loop = self.entering_loop, False
        try:
            walked = self.walk(block, stack, region, entering_loop=entering)
        finally:
            self.active_handlers.pop()
            self.protected.pop()
        if walked.stack is not None:  # values computed inside must be computed inside
            executor = BlockExecutor(self.frame, walked.stack, walked.stmts)
            executor.flush(set(rebound), True)
        return walked

    def emit_with(self, block, handler, stack, out, region):
        if len(stack) < 2 or not isinstance(stack[-2], WithExit) or not isinstance(stack[-1], WithEnter):
            raise DecompileError("with-block without BEFORE_WITH")
        exit_marker, entered = stack[-2], stack[-1]
        walked = self.protected_body(block, handler, stack, early_exit=self.with_early_return)
        item = ast.withitem(context_expr=exit_marker.manager, optional_vars=entered.target)
        statement = ast.AsyncWith if exit_marker.is_async else ast.With
        out.append(statement(items=[item], body=walked.stmts or [ast.Pass()], lineno=0))
        if walked.stack is None:
            return None, None, None
        return walked.exit, walked.stack, None

    def with_early_return(self, block: Block):
        """A `return` inside a with-block: __exit__(None, None, None) inlined, then RETURN_VALUE;
        or a `break`/`continue`: that call, then the jump (or CPython's copy of what follows the loop)."""
        returned = self.return_through_with(block)
        if returned is not None:
            return returned
        if _is_exit_call(block.instrs[:EXIT_CALL_LENGTH]) and len(block.instrs) > EXIT_CALL_LENGTH:
            return self.loop_exit_after(block, block.instrs[EXIT_CALL_LENGTH:])
        if _is_exit_call(block.instrs) and len(block.succs) == 1 and only_jumps(block.succs[0]):
            return self.loop_exit_after(block.succs[0], block.succs[0].instrs)  # (the jump in a block of its own)
        return None

    def return_through_with(self, block: Block):
        """__exit__(None, None, None) inlined, then RETURN_VALUE of the value computed inside (SWAP
        puts it below __exit__), or of a constant.  Anything else after the exit call is code after
        the with statement, which must not move inside it (3.10 ran `return f()` before __exit__)."""
        instrs = block.instrs
        names = [i.name for i in instrs]
        computed = names[:1] == ["SWAP"]
        i = int(computed)
        args = names[i:i + 3]
        if args not in (["LOAD_CONST", "COPY", "COPY"], ["LOAD_CONST"] * 3) or instrs[i].argval is not None:
            return None
        i += 3
        if names[i:i + 1] not in (["CALL"], ["CALL_LEGACY"]):
            return None
        i += 1
        if names[i:i + 3] == ["GET_AWAITABLE", "LOAD_CONST", "YIELD_FROM"]:  # async with: awaited __aexit__
            i += 3
        if names[i:] == ["POP_TOP", "RETURN_VALUE"] and computed:
            return block, None  # the inlined __exit__ call is a no-op for the executor
        if names[i:] == ["POP_TOP", "LOAD_CONST", "RETURN_VALUE"] and not computed:
            return block, None  # `return <constant>`: the same inside the with or just after it
        if names[i:] == ["POP_TOP"] and len(block.succs) == 1 and self.return_through_with(block.succs[0]) is not None:
            return block, None  # `with a, b:` (or nested withs): each __exit__ inlined in turn
        return None

    def emit_try(self, block, handler, stack, out, region):
        depth, lasti = next((d, last) for _s, _e, t, d, last in self.cfg.entries if t == handler.start)
        base = stack[:depth]
        saved_exception = [ExcInfo() for _ in range(FEATURES["exception_values"])]  # 3.10: a triple
        h_stack = copy_stack(base) + ([LastI()] if lasti else []) + saved_exception + [CaughtException()]
        finally_stmts = self.finally_clause(handler, h_stack)
        if finally_stmts is not None:
            self.active_finally.append(handler)
            try:
                body = self.protected_body(block, handler, stack, rebound=_assigned_names(finally_stmts),
                                           early_exit=lambda b: self.finally_early_return(b, handler))
            finally:
                self.active_finally.pop()
            return self.finish_finally(body, finally_stmts, handler, out)
        if any(i.name == "CHECK_EG_MATCH" for i in handler.instrs):
            return self.emit_try_star(block, handler, stack, base, out, region)
        body = self.protected_body(block, handler, stack, early_exit=region.early_exit)
        clauses, after = self.except_clauses(handler, h_stack, region.early_exit)
        after = self.beyond_jumps(after) if after is not None else after  # (as the body's walk leaves)
        statement = ast.Try(body=body.stmts or [ast.Pass()], handlers=clauses, orelse=[], finalbody=[])
        out.append(statement)
        if body.stack is None:
            return (after, base, None) if after is not None else (None, None, None)
        if after is None or body.exit is after:
            return body.exit, body.stack, None
        if self.same_exit_code(body.exit, after):
            return after, body.stack, None
        resume = region.early_exit(body.exit) if region.early_exit is not None else None
        if resume is not None and resume is not NOT_EXPRESSIBLE:  # the body ends in a return through with/finally
            self.finish_early_exit(body, None, resume)
            statement.body = body.stmts
            return after, base, None
        orelse = self.walk(body.exit, body.stack,
                           Region(stop=after, leaves=region.leaves, early_exit=region.early_exit))
        if orelse.stack is not None and orelse.exit is not after and not self.same_exit_code(orelse.exit, after):
            raise DecompileError("the else path and the except clauses of a try leave it at different places")
        statement.orelse = orelse.stmts
        return after, (orelse.stack if orelse.stack is not None else base), None

    # ---- except* (3.11+) -----------------------------------------------------------------------
    def emit_try_star(self, block, handler, stack, base, out, region):
        """`try ... except* E as e: ...`.  Each clause splits the exception group (CHECK_EG_MATCH);
        what the clauses leave is re-raised (PREP_RERAISE_STAR); clauses cannot return, break
        or continue, so each body runs to its end."""
        body = self.protected_body(block, handler, stack, early_exit=region.early_exit)
        clauses, last_miss = self.star_clauses(handler)
        resume, skip = self.star_resume(last_miss)
        if sys.version_info < (3, 11):  # no except* (nor the bytecode that leads here) before 3.11
            raise DecompileError("except* needs Python 3.11")
        out.append(ast.TryStar(body=body.stmts or [ast.Pass()], handlers=clauses, orelse=[], finalbody=[]))
        if body.stack is None:
            return resume, base, skip
        if body.exit is resume and skip is None:
            return resume, body.stack, None
        if skip is not None and self.same_tail(resume, skip, body.exit):
            return body.exit, body.stack, None
        if skip is None:
            orelse = self.walk(body.exit, body.stack, Region(stop=resume, leaves=region.leaves))
            if orelse.stack is None or orelse.exit is resume:
                out[-1].orelse = orelse.stmts
                return resume, (orelse.stack if orelse.stack is not None else base), None
        raise DecompileError("the else path and the except* clauses of a try leave it at different places")

    def star_clauses(self, handler: Block):
        """The except* clauses, and the block the last clause's no-match test jumps to."""
        clauses = []
        header = handler
        instrs = list(handler.body[1:])
        while instrs and instrs[0].name in ("COPY", "BUILD_LIST", "SWAP"):  # the group and its result list
            instrs = instrs[1:]
        while True:
            check = next((k for k, i in enumerate(instrs) if i.name == "CHECK_EG_MATCH"), None)
            if check is None or len(header.succs) != 2:
                raise DecompileError("unrecognised except* clause")
            type_expr = self.star_type(instrs[:check])
            matched, missed = header.succs
            first = matched.instrs[0]
            if first.name not in ("STORE_FAST", "STORE_NAME", "STORE_DEREF", "STORE_GLOBAL", "POP_TOP"):
                raise DecompileError("unrecognised except* clause")
            exc_name = first.argval if first.name != "POP_TOP" else None
            clauses.append(ast.ExceptHandler(type=type_expr, name=exc_name, body=self.star_body(matched, first)))
            following = missed.succs[0] if [i.name for i in missed.instrs] == ["POP_TOP"] and missed.succs else None
            if following is None or not any(i.name == "CHECK_EG_MATCH" for i in following.instrs):
                return clauses, missed
            header, instrs = following, following.body

    def star_type(self, instrs) -> ast.expr:
        out: list = []
        executor = BlockExecutor(self.frame, [], out)
        executor.run(instrs)
        if out or len(executor.stack) != 1:
            raise DecompileError("unrecognised except* type test")
        return executor.expr(executor.pop())

    def star_body(self, matched: Block, store: Instr) -> list:
        start, skip = self.after_instr(matched, store)
        cleanup = start.handler
        if cleanup is None or cleanup is matched.handler:
            return [ast.Pass()]  # an empty body has no range of its own in the exception table
        self.active_handlers.append(cleanup)
        try:
            region = Region(leaves=lambda b: cleanup not in self.handler_chain(b))
            walked = self.walk(start, [], region, skip_until=skip)
        finally:
            self.active_handlers.pop()
        return walked.stmts or [ast.Pass()]

    def star_resume(self, last_miss: Block):
        """Where normal flow resumes after the clauses: just after the POP_EXCEPT on the path where
        PREP_RERAISE_STAR left nothing to re-raise, as (block, offset within it or None)."""
        block: Block | None = last_miss
        seen: set[Block] = set()
        while block is not None and block not in seen:
            seen.add(block)
            if block.last.name == "POP_JUMP_IF_NOT_NONE" and any(i.name == "PREP_RERAISE_STAR" for i in block.instrs):
                block = block.succs[0]
                break
            block = block.succs[0] if len(block.succs) == 1 else None
        while block is not None and block not in seen:
            seen.add(block)
            names = [i.name for i in block.instrs]
            if "POP_EXCEPT" in names:
                rest = block.instrs[names.index("POP_EXCEPT") + 1:]
                if not rest or [i.name for i in rest] == ["JUMP"]:
                    return (block.succs[0] if block.succs else None), None
                return block, rest[0].offset
            block = block.succs[0] if len(block.succs) == 1 and set(names) <= {"POP_TOP"} else None
        raise DecompileError("unrecognised end of except* clauses")

    def same_tail(self, block: Block, skip: int, other: Block | None) -> bool:
        """The instructions of `block` from `skip` on are a copy of `other` (a duplicated exit)."""
        if other is None or block.succs or other.succs:
            return False
        tail = [(i.name, repr(i.argval)) for i in block.instrs if i.offset >= skip]
        return tail == [(i.name, repr(i.argval)) for i in other.instrs]

    def except_clauses(self, handler: Block, stack: list, early_exit=None):
        """The `except` clauses of a handler, and the block where they rejoin normal flow.
        `early_exit` (of an enclosing with/finally) recognises a clause that returns through it."""
        clauses = []
        after = None
        block, instrs = handler, handler.body[1:]
        while True:
            kind = self.classify_clause(instrs)
            if kind == "reraise":
                break
            if kind == "finally":
                raise DecompileError("unrecognised exception handler")
            type_expr, exc_name, start, skip = self.clause_header(block, instrs, stack, kind)
            if exc_name:
                self.exception_names.add(exc_name)
            clause_region = Region(stop=after, handler_exit=True, early_exit=early_exit)
            walked = self.walk(start, copy_stack(stack[:-1]), clause_region, skip_until=skip)
            resume = early_exit(walked.exit) if early_exit and walked.stack is not None and walked.exit else None
            if resume is not None and resume is not NOT_EXPRESSIBLE:  # return/break/continue through finally/__exit__
                self.finish_early_exit(walked, None, resume)
            if walked.stack is not None:
                after = after or walked.exit
            clauses.append(ast.ExceptHandler(type=type_expr, name=exc_name, body=walked.stmts or [ast.Pass()]))
            if kind == "bare":
                break
            block = block.succs[1]
            instrs = block.body
        return clauses, after

    def classify_clause(self, instrs) -> str:
        names = [i.name for i in instrs]
        if names and names[0] == "RERAISE":
            return "reraise"
        if "CHECK_EXC_MATCH" in names:
            return "typed"
        if "CHECK_EG_MATCH" in names:
            return "star"
        if names and names[0] == "POP_TOP":
            return "bare"
        return "finally"

    def clause_header(self, block, instrs, stack, kind):
        """(type expression, `as` name, block and offset where the clause body starts).
        The caught exception is one stack value from 3.11 on, three (type, value, traceback) in 3.10;
        the `as` name stores the value."""
        count = FEATURES["exception_values"]
        if kind == "bare":
            return (None, None, *self.after_instrs(block, instrs[0], count))
        out: list = []
        executor = BlockExecutor(self.frame, copy_stack(stack), out)
        check = next(i for i, ins in enumerate(instrs) if ins.name == "CHECK_EXC_MATCH")
        executor.run(instrs[:check])
        type_expr = executor.expr(executor.pop())
        if out:
            raise DecompileError("statements inside an except clause's type test")
        matched = block.succs[0]
        value_ins = matched.instrs[count // 2] if len(matched.instrs) > count // 2 else None
        if value_ins is None:
            raise DecompileError("unrecognised except clause")
        if value_ins.name in ("STORE_FAST", "STORE_NAME", "STORE_DEREF", "STORE_GLOBAL"):
            return (type_expr, value_ins.argval, *self.after_instrs(matched, matched.instrs[0], count))
        if value_ins.name == "POP_TOP":
            return (type_expr, None, *self.after_instrs(matched, matched.instrs[0], count))
        raise DecompileError("unrecognised except clause")

    def after_instrs(self, block: Block, instr: Instr, count: int):
        index = block.instrs.index(instr) + count - 1
        return self.after_instr(block, block.instrs[index])

    def after_instr(self, block: Block, instr: Instr):
        index = block.instrs.index(instr)
        if index + 1 < len(block.instrs):
            return block, block.instrs[index + 1].offset
        return block.succs[0], None

    def finally_clause(self, handler: Block, stack: list):
        """The statements of a `finally` handler (PUSH_EXC_INFO, body, RERAISE), else None."""
        if self.classify_clause(handler.body[1:]) != "finally":
            return None
        start, skip = self.after_instr(handler, handler.instrs[0])
        self.active_handlers.append(handler)
        try:
            walked = self.walk(start, copy_stack(stack), Region(), skip_until=skip)
        finally:
            self.active_handlers.pop()
        if walked.stack is not None:
            raise DecompileError("unrecognised finally handler")
        stmts = _without_final_reraises(walked.stmts)
        if any(getattr(n, "reraise", False) for n in same_scope_nodes(stmts)):
            raise DecompileError("a finally handler that re-raises before its end")
        return stmts

    def is_finally_handler(self, handler: Block) -> bool:
        """A handler the user wrote (not the compiler's cleanup, which re-raises too) that is a finally."""
        return handler.instrs[0].name == "PUSH_EXC_INFO" and self.classify_clause(handler.body[1:]) == "finally"

    def protected_by(self, handler: Block, block: Block) -> bool:
        """Is `block` in the try/with of `handler`?  (3.12+ leave a block that only jumps out of the
        exception table: it is where the blocks that jump to it are.)"""
        if handler in self.handler_chain(block):
            return True
        return only_jumps(block) and bool(block.preds) and all(handler in self.handler_chain(p) for p in block.preds)

    def starts_with_finally_copy(self, block: Block, loop_header: Block) -> bool:
        """Does `block`, where a loop goes on, open with the inlined body of a try...finally that one
        of its predecessors is in, a try inside the loop (a `break` through it)?  Not one around
        the whole loop: there `block` is where its body ends."""
        latches = [p for p in loop_header.preds if loop_header in self.cfg.dominators.get(p, ())]
        around = [h for h in self.handler_chain(loop_header) if all(self.protected_by(h, p) for p in latches)]
        for pred in block.preds:
            for handler in self.handler_chain(pred):
                if handler in self.handler_chain(block) or handler in around or not self.is_finally_handler(handler):
                    continue
                if self.copy_resumes(handler, block) is not None:
                    return True
        return False

    def check_stays_inside(self, block: Block, region: Region) -> None:
        """A walk that knows nothing of the try/with being emitted (a loop body, the way out of a
        loop) may leave it only by a way the statement can express (a return through `with`);
        walking on would put the code after the statement inside it."""
        if region.leaves is not None or not self.protected or all(i.name == "JUMP" for i in block.instrs):
            return
        inner = self.protected[-1]
        assert inner.leaves is not None  # a try/with body's region says where the statement ends
        if not inner.leaves(block) or _is_exit_call(block.instrs):  # __exit__(None, None, None): no statement
            return
        if any(block is loop.header or block is loop.follow for loop in self.loops):
            return  # continue / break
        if plain_return(block) is not None:
            return  # nothing in it can raise: the same inside the try as after it
        resume = inner.early_exit(block) if inner.early_exit is not None else None
        if resume is None or resume is NOT_EXPRESSIBLE:
            raise DecompileError("a loop leaves its try/with block another way than break, continue or return")

    def finally_exit(self, block: Block, region: Region):
        """A walk that knows nothing of the innermost try...finally being emitted (a loop body, the
        way out of a loop, an except clause) reaching an inlined copy of its body: the `break`,
        `continue` or (block, offset) of the `return` behind that copy.  Walking the copy as plain
        code would run the finally body twice."""
        if not self.active_finally or region.leaves is not None:
            return None
        handler = self.active_finally[-1]
        if handler in self.handler_chain(block) or all(i.name == "JUMP" for i in block.instrs):
            return None
        resume = self.finally_early_return(block, handler)
        if resume is None or resume is NOT_EXPRESSIBLE:
            raise DecompileError("a path leaves try...finally in a way the decompiler cannot express")
        return resume

    def finally_early_return(self, block: Block, handler: Block):
        """A `return`, `break` or `continue` inside try...finally: the finally body inlined first."""
        resume = self.after_finally_copy(handler, block)
        if resume is None or resume is NOT_EXPRESSIBLE or resume is ENDS:
            return None if resume is None else NOT_EXPRESSIBLE
        resume_block = self.cfg.by_offset[resume.offset]
        rest = [i for i in resume_block.instrs if i.offset >= resume.offset]
        # the value must already be on the stack: `return v` after the try statement loads it here
        if [i.name for i in rest] in (["RETURN_VALUE"], ["LOAD_CONST", "RETURN_VALUE"]):
            return resume_block, resume.offset  # (an offset even at the block's start: walk on, not into the copy)
        return self.loop_exit_after(resume_block, rest) or NOT_EXPRESSIBLE

    def loop_exit_after(self, block: Block, rest: list):
        """`continue` when only a jump to the innermost loop's header is left; `break` when what is
        left is the loop's exit (a `for` loop's break pops the iterator, then jumps there or runs a
        copy of the code after the loop, which CPython duplicates onto the break path)."""
        loop = next((loop for loop in reversed(self.loops) if loop.body is not None), None)
        if loop is None:
            return None
        if [i.name for i in rest] == ["JUMP"] and block.succs[0] is loop.header:
            return ast.Continue()
        if loop.exhausted is not None and rest and rest[0].name == "POP_TOP":
            rest = rest[1:]
        if [i.name for i in rest] == ["JUMP"] and block.succs[0] in (loop.follow, loop.exhausted):
            return ast.Break()
        after_loop = loop.follow or loop.exhausted
        if after_loop is not None and rest and rest[-1].name in ("RETURN_VALUE", "RAISE_VARARGS"):
            code = after_loop.instrs
            while after_loop is loop.exhausted and code and code[0].name == "POP_TOP":  # END_FOR's pops
                code = code[1:]
            if _same_code(rest, code) and not after_loop.succs:
                return ast.Break()
        return None

    def copy_resumes(self, handler: Block, block: Block) -> set[int] | None:
        """Positions (in cfg.instrs) where the code after a copy of `handler`'s finally body that
        starts at `block` goes on (see copies.py); None when `block` does not start such a copy."""
        matcher = self.cfg.copy_matcher
        first = matcher.position[handler.start] + 1  # after PUSH_EXC_INFO
        return matcher.resumes(first, matcher.position[block.start])

    def after_finally_copy(self, handler: Block, block: Block):
        """The instruction after the inlined finally body starting at `block`; None when there is no
        copy there, ENDS when every path through the copy returns or raises, NOT_EXPRESSIBLE when
        paths through it go on at different places."""
        resumes = self.copy_resumes(handler, block)
        if resumes is None:
            return None
        if not resumes:
            return ENDS
        matcher, instrs = self.cfg.copy_matcher, self.cfg.instrs
        if len({matcher.through_jumps(j) for j in resumes}) > 1 and not self.same_exit_positions(resumes):
            return NOT_EXPRESSIBLE
        first = min(resumes)
        if first >= len(instrs) or (first > 0 and instrs[first - 1].offset == instrs[first].offset):
            return NOT_EXPRESSIBLE  # the copy ends inside a fused instruction (3.13 STORE_FAST_LOAD_FAST)
        return instrs[first]

    def same_exit_positions(self, positions: set[int]) -> bool:
        """Copies of one exit (CPython duplicates a small `return` onto each path)."""
        tails = set()
        for j in positions:
            block = self.cfg.by_offset[self.cfg.instrs[j].offset]
            if block.succs:
                return False
            tails.add(tuple((i.name, repr(i.argval)) for i in block.instrs if i.offset >= self.cfg.instrs[j].offset))
        return len(tails) == 1

    def finish_finally(self, body: Walked, final_stmts: list, handler: Block, out: list):
        out.append(ast.Try(body=body.stmts or [ast.Pass()], handlers=[], orelse=[],
                           finalbody=final_stmts or [ast.Pass()]))
        if body.stack is None:
            return None, None, None
        assert body.exit is not None  # (None failed on an attribute in after_finally_copy before this assert)
        resume = self.after_finally_copy(handler, body.exit)
        if resume is ENDS:
            return None, None, None
        if resume is None or resume is NOT_EXPRESSIBLE:
            raise DecompileError("the code after a try...finally is not a copy of its finally body")
        return self.cfg.by_offset[resume.offset], body.stack, resume.offset


EXIT_CALL_LENGTH = 5  # three None (3.10: one and two copies), the call, POP_TOP


def _is_exit_call(instrs: list) -> bool:
    """The inlined `__exit__(None, None, None)` call of a with-block (and nothing that makes a statement)."""
    names = [i.name for i in instrs]
    return (len(names) <= 6 and any(n.startswith("CALL") for n in names)
            and set(names) <= {"LOAD_CONST", "COPY", "CALL", "CALL_LEGACY", "POP_TOP", "JUMP"}
            and all(i.argval is None for i in instrs if i.name == "LOAD_CONST"))


def _same_code(a: list, b: list) -> bool:
    return [(i.name, repr(i.argval)) for i in a] == [(i.name, repr(i.argval)) for i in b]


def _assigned_names(stmts: list) -> set[str]:
    module = ast.Module(body=stmts, type_ignores=[])
    return {n.id for n in ast.walk(module) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}


def _is_compiler_reraise(stmt) -> bool:
    return isinstance(stmt, ast.Raise) and getattr(stmt, "reraise", False)


def _without_final_reraises(stmts: list) -> list:
    """A finally handler's statements without the RERAISE that ends each of its paths: CPython
    copies it, and short tails before it, onto every branch that reaches it (into an except clause
    that ends the body, too).  Such a RERAISE in tail position is what falling off the end of the
    finally body does."""
    stmts = _fold_reraising_branch(_without_copied_continuations(stmts))
    if not stmts:
        return stmts
    *rest, last = stmts
    if _is_compiler_reraise(last):
        return _without_final_reraises(rest)
    return [*rest, _without_arm_ends(last, _without_final_reraises)]


def _without_arm_ends(stmt, strip):
    """`stmt` with `strip(statements)` applied to each of its arms that ends where `stmt` ends:
    both arms of an `if`, the clauses of a `try` (without `finally`) and its body or `else`."""
    if isinstance(stmt, ast.If):
        return ast.If(test=stmt.test, body=strip(stmt.body) or [ast.Pass()], orelse=strip(stmt.orelse))
    if isinstance(stmt, ast.Try) and not stmt.finalbody:  # (not TryStar: its clauses cannot re-raise)
        handlers = [ast.ExceptHandler(type=h.type, name=h.name, body=strip(h.body) or [ast.Pass()])
                    for h in stmt.handlers]
        body, orelse = stmt.body, stmt.orelse
        if orelse:
            orelse = strip(orelse)
        else:
            body = strip(body) or [ast.Pass()]
        return ast.Try(body=body, handlers=handlers, orelse=orelse, finalbody=[])
    return stmt


def _without_copied_continuations(stmts: list) -> list:
    """Where an arm of a statement ends in a copy of the statements that follow it, and those end
    in the RERAISE (CPython copies short exits onto each branch), the arm falls through to them."""
    stmts = list(stmts)
    for i in range(len(stmts) - 2, -1, -1):
        following = stmts[i + 1:]
        if _is_compiler_reraise(following[-1]):
            # the lambda runs inside _without_arm_ends, in this iteration
            stmts[i] = _without_arm_ends(stmts[i], lambda arm: _without_copy(arm, following))  # noqa: B023
    return stmts


def _without_copy(arm: list, following: list) -> list:
    count = len(following)
    if len(arm) >= count and _is_compiler_reraise(arm[-1]) and _dumps(arm[-count:]) == _dumps(following):
        arm = arm[:-count]
    if arm:
        arm = [*arm[:-1], _without_arm_ends(arm[-1], lambda inner: _without_copy(inner, following))]
    return arm


def _dumps(stmts: list) -> list[str]:
    return [ast.dump(s) for s in stmts]


def _fold_reraising_branch(stmts: list) -> list:
    """`if c: a; RERAISE` then `rest`: `rest` runs only when `c` is false, so it is the `else` (and
    the RERAISE is in tail position)."""
    for i, stmt in enumerate(stmts[:-1]):
        if not isinstance(stmt, ast.If):
            continue
        rest = stmts[i + 1:]
        if stmt.body and _is_compiler_reraise(stmt.body[-1]):
            return [*stmts[:i], ast.If(test=stmt.test, body=stmt.body, orelse=stmt.orelse + rest)]
        if stmt.orelse and _is_compiler_reraise(stmt.orelse[-1]):
            return [*stmts[:i], ast.If(test=stmt.test, body=stmt.body + rest, orelse=stmt.orelse)]
    return stmts
