"""Comprehension loops (`for`/`if` statements around an append or a yield) back to expressions."""

from __future__ import annotations

import ast

from .values import DecompileError

APPEND = "__append__"


def from_statements(stmts: list, kind: str) -> ast.expr:
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
    if len(stmts) != 1:
        raise DecompileError("comprehension body is not a single loop")
    stmt = stmts[0]
    if isinstance(stmt, ast.For) and not stmt.orelse:
        generators.append(ast.comprehension(target=stmt.target, iter=stmt.iter, ifs=[], is_async=0))
        return _walk(stmt.body, generators)
    if isinstance(stmt, ast.If) and generators:
        if not stmt.orelse or _only_continue(stmt.orelse):
            generators[-1].ifs.append(stmt.test)
            return _walk(stmt.body, generators)
        if _only_continue(stmt.body):
            generators[-1].ifs.append(_negate(stmt.test))
            return _walk(stmt.orelse, generators)
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and getattr(stmt.value.func, "id", None) == APPEND:
        return stmt.value.args
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Yield):
        return [stmt.value.value]
    raise DecompileError(f"unexpected {type(stmt).__name__} in a comprehension")


def _only_continue(stmts) -> bool:
    return len(stmts) == 1 and isinstance(stmts[0], ast.Continue)


def _ends_in_continue(stmts) -> bool:
    return _only_continue(stmts)


def _negate(test):
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return test.operand
    return ast.UnaryOp(op=ast.Not(), operand=test)
