"""Behaviour-preserving rewrites that make the structured output read like source."""

from __future__ import annotations

import ast
from types import CodeType

TERMINAL = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def tidy(stmts: list, code: CodeType) -> list:
    stmts = _flatten_else(stmts)
    _strip_loop_continues(stmts)
    return stmts


def _strip_loop_continues(stmts: list) -> None:
    for stmt in stmts:
        for node in ast.walk(stmt):
            if isinstance(node, (ast.For, ast.While)):
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
    """`if c: return x else: rest` -> `if c: return x` then `rest`; applied at every level."""
    result = []
    for stmt in stmts:
        for field in ("body", "orelse", "finalbody"):
            if hasattr(stmt, field) and isinstance(getattr(stmt, field), list):
                setattr(stmt, field, _flatten_else(getattr(stmt, field)))
        if isinstance(stmt, ast.Try):
            for h in stmt.handlers:
                h.body = _flatten_else(h.body)
        if isinstance(stmt, ast.If) and stmt.orelse and _terminates(stmt.body) and not _is_elif(stmt):
            orelse = stmt.orelse
            stmt.orelse = []
            result.append(stmt)
            result.extend(orelse)
            continue
        result.append(stmt)
    return result


def _is_elif(stmt: ast.If) -> bool:
    return len(stmt.orelse) == 1 and isinstance(stmt.orelse[0], ast.If)
