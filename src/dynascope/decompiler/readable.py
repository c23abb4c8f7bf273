"""Behaviour-preserving rewrites that make the structured output read like source."""

from __future__ import annotations

import ast
from types import CodeType

LOOPS = (ast.For, ast.AsyncFor, ast.While)
DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
TERMINAL = (ast.Return, ast.Raise, ast.Continue, ast.Break)
TEMP_PREFIX = "__t"


def tidy(stmts: list, code: CodeType) -> list:
    stmts = _rewrite_lists(stmts, _empty_then)
    stmts = _rewrite_lists(stmts, _asserts)
    stmts = _rewrite_lists(stmts, _flatten_else)
    stmts = _rewrite_lists(stmts, _decorators)
    stmts = _rewrite_lists(stmts, _return_inside_try)
    stmts = _chained_assignments(stmts)
    stmts = _rewrite_lists(stmts, _while_loops)
    _while_true_with_test(stmts)
    _strip_loop_continues(stmts)
    _drop_unread_walrus_names(stmts)
    return stmts


def _rewrite_lists(stmts: list, rewrite) -> list:
    """Apply `rewrite(list) -> list` to every statement list, innermost first."""
    for stmt in stmts:
        for field in ("body", "orelse", "finalbody"):
            value = getattr(stmt, field, None)
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                setattr(stmt, field, _rewrite_lists(value, rewrite))
        for handler in getattr(stmt, "handlers", ()):
            handler.body = _rewrite_lists(handler.body, rewrite)
        for case in getattr(stmt, "cases", ()):
            case.body = _rewrite_lists(case.body, rewrite)
    return rewrite(stmts)


NEGATED_COMPARISONS = {ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}


def negate(test: ast.expr) -> ast.expr:
    """`not test`, simplified only where that is exact (no `<` -> `>=`: NaN and custom operators)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return test.operand
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in NEGATED_COMPARISONS:
        return ast.Compare(left=test.left, ops=[NEGATED_COMPARISONS[type(test.ops[0])]()], comparators=test.comparators)
    if isinstance(test, ast.BoolOp):  # De Morgan keeps truthiness and evaluation order
        flipped = ast.And() if isinstance(test.op, ast.Or) else ast.Or()
        return ast.BoolOp(op=flipped, values=[negate(v) for v in test.values])
    return ast.UnaryOp(op=ast.Not(), operand=test)


def _empty_then(stmts: list) -> list:
    """`if c: pass else: body` -> `if not c: body`."""
    for stmt in stmts:
        if isinstance(stmt, ast.If) and stmt.orelse and all(isinstance(s, ast.Pass) for s in stmt.body):
            stmt.test, stmt.body, stmt.orelse = negate(stmt.test), stmt.orelse, []
    return stmts


def _terminates(stmts: list) -> bool:
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, TERMINAL):
        return True
    if isinstance(last, ast.If):
        return _terminates(last.body) and _terminates(last.orelse)
    return False


def _flatten_else(stmts: list) -> list:
    """`if c: return x else: rest` -> `if c: return x` then `rest`."""
    result: list[ast.stmt] = []
    for stmt in stmts:
        if isinstance(stmt, ast.If) and stmt.orelse and _terminates(stmt.body) and not _is_elif(stmt):
            orelse, stmt.orelse = stmt.orelse, []
            result.append(stmt)
            result.extend(orelse)
        else:
            result.append(stmt)
    return result


def _is_elif(stmt: ast.If) -> bool:
    return len(stmt.orelse) == 1 and isinstance(stmt.orelse[0], ast.If)


def _assert_raise(stmt) -> tuple[bool, ast.expr | None]:
    """Is `stmt` the raise an `assert` compiles to?  (and its message)"""
    if not isinstance(stmt, ast.Raise) or stmt.cause is not None:
        return False, None
    if getattr(stmt.exc, "from_assert", False):
        return True, None
    if isinstance(stmt.exc, ast.Call) and getattr(stmt.exc.func, "from_assert", False) and len(stmt.exc.args) == 1:
        return True, stmt.exc.args[0]
    return False, None


def _asserts(stmts: list) -> list:
    """`if c: rest else: raise AssertionError(msg)` (from LOAD_ASSERTION_ERROR) -> `assert c, msg`."""
    result: list[ast.stmt] = []
    for stmt in stmts:
        if isinstance(stmt, ast.If) and len(stmt.orelse) == 1:
            is_assert, msg = _assert_raise(stmt.orelse[0])
            if is_assert:
                result.append(ast.Assert(test=stmt.test, msg=msg))
                result.extend(s for s in stmt.body if not isinstance(s, ast.Pass))
                continue
        result.append(stmt)
    return result


def _decorators(stmts: list) -> list:
    """`def f(): ...` (or a class) then `f = deco(f)` -> `@deco def f(): ...`."""
    result: list[ast.stmt] = []
    for stmt in stmts:
        previous = result[-1] if result else None
        if isinstance(previous, DEFINITIONS) and isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = stmt.targets[0]
            decorators = _decorator_chain(stmt.value, previous.name)
            if isinstance(target, ast.Name) and target.id == previous.name and decorators:
                previous.decorator_list = decorators + previous.decorator_list
                continue
        result.append(stmt)
    return result


def _decorator_chain(value, function_name: str) -> list | None:
    chain = []
    while isinstance(value, ast.Call) and len(value.args) == 1 and not value.keywords:
        chain.append(value.func)
        value = value.args[0]
    if chain and isinstance(value, ast.Name) and value.id == function_name:
        return chain
    return None


def _return_inside_try(stmts: list) -> list:
    """`try: ...; __t = e` + `return __t`, with every handler leaving -> `try: ...; return e`
    (also through nested such trys)."""
    result: list[ast.stmt] = []
    for stmt in stmts:
        previous = result[-1] if result else None
        if isinstance(stmt, ast.Return) and isinstance(stmt.value, ast.Name) and stmt.value.id.startswith(TEMP_PREFIX):
            body = _body_ending_in_assignment(previous, stmt.value.id)
            if body is not None:
                body[-1] = ast.Return(value=body[-1].value)
                continue
        result.append(stmt)
    return result


def _body_ending_in_assignment(stmt, temp: str) -> list | None:
    """The try body (searched through trailing nested trys) whose last statement is `temp = ...`."""
    if not (isinstance(stmt, ast.Try) and stmt.body and not stmt.orelse and not stmt.finalbody
            and all(_terminates(h.body) for h in stmt.handlers)):
        return None
    last = stmt.body[-1]
    if (isinstance(last, ast.Assign) and len(last.targets) == 1 and isinstance(last.targets[0], ast.Name)
            and last.targets[0].id == temp):
        return stmt.body
    return _body_ending_in_assignment(last, temp)


def _while_loops(stmts: list) -> list:
    """3.11+ compile `while c: body` as `if c:` + a loop that re-tests `c` at its bottom:

        if c:                       if c:                       if c:
            while True:                 while True:                 while True:
                body                        body                        body
                if c: continue              if c: continue              if c: continue
                break                       rest                        e; break
                                        rest                        else: e

    Each is `while c: body` (then `rest`; or with `else: e`), provided `body` has no `continue`
    of its own (that would skip the test at the bottom)."""
    result = []
    i = 0
    while i < len(stmts):
        stmt = stmts[i]
        rest = stmts[i + 1:]
        loop = _guarded_loop(stmt)
        if loop is not None:
            test, body, exit_path = loop
            if _same(exit_path[-1:], [ast.Break()]) and _same(exit_path[:-1], stmt.orelse):
                result.append(ast.While(test=test, body=body, orelse=exit_path[:-1]))
                i += 1
                continue
            if not stmt.orelse and _terminates(exit_path) and _same(exit_path, rest):
                result.append(ast.While(test=test, body=body, orelse=[]))
                i += 1
                continue
        result.append(stmt)
        i += 1
    return result


def _while_true_with_test(stmts: list) -> None:
    """`while True: if not c: break; rest` -> `while c: rest` (also `if c: rest... else: break`)."""
    for node in [n for stmt in stmts for n in ast.walk(stmt)]:
        if not (isinstance(node, ast.While) and isinstance(node.test, ast.Constant) and node.test.value is True
                and not node.orelse and node.body):
            continue
        first = node.body[0]
        if isinstance(first, ast.If) and _same(first.body, [ast.Break()]) and not first.orelse:
            node.test, node.body = negate(first.test), node.body[1:] or [ast.Pass()]
        elif isinstance(first, ast.If) and len(node.body) == 1 and _same(first.orelse, [ast.Break()]):
            node.test, node.body = first.test, first.body or [ast.Pass()]
        elif (len(node.body) == 2 and isinstance(first, ast.If) and not first.orelse and _terminates(first.body)
              and _same(node.body[1:], [ast.Break()])):
            node.test, node.body = first.test, first.body


def _guarded_loop(stmt):
    """(test, body, exit path) when `stmt` is `if c: while True: body; if c: continue; exit`."""
    if not isinstance(stmt, ast.If) or len(stmt.body) != 1 or not isinstance(stmt.body[0], ast.While):
        return None
    loop = stmt.body[0]
    if not (isinstance(loop.test, ast.Constant) and loop.test.value is True) or loop.orelse:
        return None
    for split, latch in enumerate(loop.body):
        if (isinstance(latch, ast.If) and not latch.orelse and _same(latch.body, [ast.Continue()])
                and _same([latch.test], [stmt.test])):
            body, exit_path = loop.body[:split], loop.body[split + 1:]
            if exit_path and _terminates(exit_path) and not _has_own_continue(body):
                return stmt.test, body or [ast.Pass()], exit_path
    return None


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(ast.dump(x) == ast.dump(y) for x, y in zip(a, b, strict=False))


def _has_own_continue(stmts: list) -> bool:
    for stmt in stmts:
        if isinstance(stmt, ast.Continue):
            return True
        if isinstance(stmt, LOOPS + DEFINITIONS + (ast.Lambda,)):
            if _has_own_continue(stmt.orelse) if isinstance(stmt, LOOPS) else False:
                return True
            continue
        for field in ("body", "orelse", "finalbody"):
            if _has_own_continue(getattr(stmt, field, None) or []):
                return True
        for handler in getattr(stmt, "handlers", ()):
            if _has_own_continue(handler.body):
                return True
    return False


def _chained_assignments(stmts: list) -> list:
    """`__t = v; a.x = __t; b[0] = __t` (the temporary used nowhere else) -> `a.x = b[0] = v`."""
    module = ast.Module(body=stmts, type_ignores=[])
    uses: dict[str, int] = {}
    for node in ast.walk(module):
        if isinstance(node, ast.Name) and node.id.startswith(TEMP_PREFIX):
            uses[node.id] = uses.get(node.id, 0) + 1
    return _rewrite_lists(stmts, lambda block: _merge_temp_assignments(block, uses))


def _merge_temp_assignments(stmts: list, uses: dict) -> list:
    result = []
    i = 0
    while i < len(stmts):
        stmt = stmts[i]
        temp = _temp_assigned(stmt)
        if temp is not None:
            readers = []
            j = i + 1
            while j < len(stmts) and _plain_copy_of(stmts[j], temp):
                readers.append(stmts[j])
                j += 1
            if len(readers) >= 2 and uses.get(temp) == len(readers) + 1:
                targets = [r.targets[0] for r in readers]
                result.append(ast.Assign(targets=targets, value=stmt.value, lineno=0))
                i = j
                continue
        result.append(stmt)
        i += 1
    return result


def _temp_assigned(stmt) -> str | None:
    if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and stmt.targets[0].id.startswith(TEMP_PREFIX)):
        return stmt.targets[0].id
    return None


def _plain_copy_of(stmt, temp: str) -> bool:
    return (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.value, ast.Name)
            and stmt.value.id == temp)


def _strip_loop_continues(stmts: list) -> None:
    for stmt in stmts:
        for node in ast.walk(stmt):
            if isinstance(node, LOOPS):
                node.body = _without_tail_continue(node.body) or [ast.Pass()]


def _without_tail_continue(stmts: list) -> list:
    if not stmts:
        return stmts
    last = stmts[-1]
    if isinstance(last, ast.Continue):
        return stmts[:-1]
    if isinstance(last, ast.If):
        last.body = _without_tail_continue(last.body) or [ast.Pass()]
        last.orelse = _without_tail_continue(last.orelse)
    if isinstance(last, ast.Try) and not last.orelse and not last.finalbody:
        last.body = _without_tail_continue(last.body) or [ast.Pass()]
        for handler in last.handlers:
            handler.body = _without_tail_continue(handler.body) or [ast.Pass()]
    return stmts


def _drop_unread_walrus_names(stmts: list) -> None:
    """Dynamo keeps some callables in locals it only ever deletes (`(tmp_1 := f)()` ... `del tmp_1`)."""
    module = ast.Module(body=stmts, type_ignores=[])
    loaded = {n.id for n in ast.walk(module) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    walrus_targets = {id(n.target) for n in ast.walk(module) if isinstance(n, ast.NamedExpr)}
    walrus_only = {n.target.id for n in ast.walk(module) if isinstance(n, ast.NamedExpr)}
    other_stores = {n.id for n in ast.walk(module) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
                    and id(n) not in walrus_targets}
    declared = {v for n in ast.walk(module) if isinstance(n, (ast.Global, ast.Nonlocal)) for v in n.names}
    unread = walrus_only - loaded - other_stores - declared  # a global or nonlocal binding is seen outside
    if not unread:
        return
    _UnwrapWalrus(unread).visit(module)
    _drop_deletes(stmts, unread)


class _UnwrapWalrus(ast.NodeTransformer):
    def __init__(self, names: set[str]):
        self.names = names

    def visit_NamedExpr(self, node):
        self.generic_visit(node)
        return node.value if node.target.id in self.names else node


def _drop_deletes(stmts: list, names: set[str]) -> None:
    had_statements = bool(stmts)
    for stmt in list(stmts):
        if isinstance(stmt, ast.Delete) and all(isinstance(t, ast.Name) and t.id in names for t in stmt.targets):
            stmts.remove(stmt)
            continue
        for field in ("body", "orelse", "finalbody"):
            value = getattr(stmt, field, None)
            if isinstance(value, list):
                _drop_deletes(value, names)
        for handler in getattr(stmt, "handlers", ()):
            _drop_deletes(handler.body, names)
    if had_statements and not stmts:
        stmts.append(ast.Pass())
