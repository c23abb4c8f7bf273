"""Comprehension loops (`for`/`if` statements around an append or a yield) back to expressions."""

from __future__ import annotations

import ast
import copy
from typing import TypeGuard

from dynascope.decompiler.values import DecompileError

APPEND = "__append__"


Comprehension = ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp


def from_statements(stmts: list, kind: str) -> Comprehension:
    """`kind` is the comprehension code's name (`<listcomp>`...) or "list"/"set"/"dict"."""
    stmts = [s for s in stmts if not _is_trailing_return(s, kind)]
    generators: list[ast.comprehension] = []
    element = _walk(stmts, generators)
    if not generators:
        raise DecompileError("comprehension without a loop")
    kind = kind.strip("<>").replace("comp", "").replace("expr", "")
    if kind == "list":
        return ast.ListComp(elt=element[0], generators=generators)
    if kind == "set":
        return ast.SetComp(elt=element[0], generators=generators)
    if kind == "dict":
        return ast.DictComp(key=element[0], value=element[1], generators=generators)
    if kind == "gen":
        return ast.GeneratorExp(elt=element[0], generators=generators)
    raise DecompileError(f"unknown comprehension kind {kind}")


def _is_trailing_return(stmt, kind) -> bool:
    return isinstance(stmt, ast.Return) and kind == "<genexpr>"


def _walk(stmts: list, generators: list) -> list:
    while stmts and isinstance(stmts[-1], (ast.Continue, ast.Pass)):
        stmts = stmts[:-1]
    if len(stmts) >= 2 and isinstance(stmts[0], ast.If) and _ends_in_continue(stmts[0].body) and not stmts[0].orelse:
        generators[-1].ifs.append(_negate(stmts[0].test))  # `if not c: continue` filters like `if c`
        return _walk(stmts[1:], generators)
    if len(stmts) >= 2 and isinstance(stmts[0], ast.If):
        stmts = [_with_rest(stmts[0], stmts[1:])]
    if len(stmts) != 1:
        raise DecompileError("comprehension body is not a single loop")
    stmt = stmts[0]
    if isinstance(stmt, (ast.For, ast.AsyncFor)) and not stmt.orelse:
        generators.append(ast.comprehension(target=stmt.target, iter=stmt.iter, ifs=[],
                                            is_async=int(isinstance(stmt, ast.AsyncFor))))
        return _walk(stmt.body, generators)
    if isinstance(stmt, ast.If) and generators:
        if not stmt.orelse or _only_continue(stmt.orelse):
            generators[-1].ifs.append(stmt.test)
            return _walk(stmt.body, generators)
        if _only_continue(stmt.body):
            generators[-1].ifs.append(_negate(stmt.test))
            return _walk(stmt.orelse, generators)
    if (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            and getattr(stmt.value.func, "id", None) == APPEND):
        return stmt.value.args
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Yield):
        return [stmt.value.value]
    if isinstance(stmt, ast.If) and generators and _filter_tree([stmt]) not in (None, True, False):
        test, element = _filter_tree([stmt])
        generators[-1].ifs.append(test)
        return element
    raise DecompileError(f"unexpected {type(stmt).__name__} in a comprehension")


def _with_rest(stmt: ast.If, rest: list) -> ast.If:
    """`if c: a` then `rest` as one `if`: `rest` goes at the end of each arm that does not
    `continue` (`x for x in xs if a or b` arrives as `if a: pass elif not b: continue`, then the
    element, copied onto the arms that CPython gave one)."""
    return ast.If(test=stmt.test, body=_arm_with_rest(stmt.body, rest), orelse=_arm_with_rest(stmt.orelse, rest))


def _arm_with_rest(arm: list, rest: list) -> list:
    if arm and isinstance(arm[-1], ast.Continue):
        return arm
    if arm and isinstance(arm[-1], ast.If):
        return [*arm[:-1], _with_rest(arm[-1], rest)]
    return [s for s in arm if not isinstance(s, ast.Pass)] + copy.deepcopy(rest)


def _filter_tree(stmts: list):
    """A comprehension filter the compiler turned into nested ifs (`if (a if c else b)`, whose
    leaves append one same element or skip): (condition, element), True/False for a leaf that
    always/never appends, or None for anything else."""
    while stmts and isinstance(stmts[-1], (ast.Continue, ast.Pass)):
        stmts = stmts[:-1]
    if len(stmts) >= 2 and isinstance(stmts[0], ast.If):
        stmts = [_with_rest(stmts[0], stmts[1:])]
    if not stmts:
        return False
    if len(stmts) == 1 and isinstance(stmts[0], ast.Expr) and _is_append(stmts[0].value):
        return True, stmts[0].value.args
    if len(stmts) == 1 and isinstance(stmts[0], ast.Expr) and isinstance(stmts[0].value, ast.Yield):
        return True, [stmts[0].value.value]  # a generator expression's element
    if len(stmts) != 1 or not isinstance(stmts[0], ast.If):
        return None
    branches = [_filter_tree(stmts[0].body), _filter_tree(stmts[0].orelse)]
    if None in branches:
        return None
    elements = [b[1] for b in branches if isinstance(b, tuple)]
    if not elements or any(ast.dump(ast.List(elts=e)) != ast.dump(ast.List(elts=elements[0])) for e in elements):
        return None
    body, orelse = (b[0] if isinstance(b, tuple) else b for b in branches)
    return _choose(stmts[0].test, body, orelse), elements[0]


def _choose(test, body, orelse) -> ast.expr:
    """A condition true when `body` holds if `test`, else when `orelse` holds (True/False: always/never)."""
    if body is True and orelse is False:
        return test
    if body is False and orelse is True:
        return _negate(test)
    if orelse is False:
        return ast.BoolOp(op=ast.And(), values=[test, body])
    if body is True:
        return ast.BoolOp(op=ast.Or(), values=[test, orelse])
    return ast.IfExp(test=test, body=ast.Constant(body) if isinstance(body, bool) else body,
                     orelse=ast.Constant(orelse) if isinstance(orelse, bool) else orelse)


def _is_append(node) -> TypeGuard[ast.Call]:
    return isinstance(node, ast.Call) and getattr(node.func, "id", None) == APPEND


def _only_continue(stmts) -> bool:
    return len(stmts) == 1 and isinstance(stmts[0], ast.Continue)


def _ends_in_continue(stmts) -> bool:
    return _only_continue(stmts)


def _negate(test):
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return test.operand
    return ast.UnaryOp(op=ast.Not(), operand=test)
