"""Small builders and tests for the `ast` nodes the decompiler produces."""

from __future__ import annotations

import ast
import sys
from types import CodeType
from typing import Any

from dynascope.decompiler.values import DecompileError, Inplace, Iter, LoopValue, SymList, Unpacked, is_marker

BINOPS = {
    "+": ast.Add, "-": ast.Sub, "*": ast.Mult, "/": ast.Div, "//": ast.FloorDiv, "%": ast.Mod,
    "**": ast.Pow, "@": ast.MatMult, "<<": ast.LShift, ">>": ast.RShift, "&": ast.BitAnd,
    "|": ast.BitOr, "^": ast.BitXor,
}
INPLACE_FUNCTIONS = {
    "+": "iadd", "-": "isub", "*": "imul", "/": "itruediv", "//": "ifloordiv", "%": "imod",
    "**": "ipow", "@": "imatmul", "<<": "ilshift", ">>": "irshift", "&": "iand", "|": "ior", "^": "ixor",
}
COMPARES = {
    "<": ast.Lt, "<=": ast.LtE, ">": ast.Gt, ">=": ast.GtE, "==": ast.Eq, "!=": ast.NotEq,
    "in": ast.In, "not in": ast.NotIn, "is": ast.Is, "is not": ast.IsNot,
}
UNARY = {"UNARY_NEGATIVE": ast.USub, "UNARY_NOT": ast.Not, "UNARY_INVERT": ast.Invert, "UNARY_POSITIVE": ast.UAdd}


def name(identifier: str, ctx=None) -> ast.Name:
    return ast.Name(id=identifier, ctx=ctx or ast.Load())


def const(value: Any) -> ast.expr:
    return ast.Constant(value=value)


NO_ARGUMENTS = ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None,
                             defaults=[])
LITERAL_TYPES = (type(None), bool, int, float, complex, str, bytes, type(...))


def constant_expr(value: Any) -> ast.expr:
    """A LOAD_CONST value as source: a literal, or the import path of an object Dynamo put in co_consts."""
    if isinstance(value, (LITERAL_TYPES, CodeType)) or (isinstance(value, frozenset) and _all_literal(value)):
        return const(value)
    if isinstance(value, tuple):
        if _all_literal(value):
            return const(value)
        return ast.Tuple(elts=[constant_expr(v) for v in value], ctx=ast.Load())
    path = _import_path(value)
    if path is None:
        raise DecompileError(f"constant {type(value).__name__} {repr(value)[:60]} has no source form")
    return path


def _all_literal(values) -> bool:
    return all(isinstance(v, LITERAL_TYPES) or (isinstance(v, tuple) and _all_literal(v)) for v in values)


def _import_path(value: Any) -> ast.expr | None:
    """`__import__('builtins').super`, `__import__('importlib').import_module('m').f`: only when that
    path leads back to this very object now (a module already imported, no `<locals>`)."""
    module_name, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if not isinstance(module_name, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    found = sys.modules.get(module_name)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if found is not value:
        return None
    if module_name == "builtins":
        node: ast.expr = call_named("__import__", const("builtins"))
    else:
        importlib = call_named("__import__", const("importlib"))
        node = ast.Call(func=ast.Attribute(value=importlib, attr="import_module", ctx=ast.Load()),
                        args=[const(module_name)], keywords=[])
    for part in qualname.split("."):
        node = ast.Attribute(value=node, attr=part, ctx=ast.Load())
    return node


def call_named(function: str, *args) -> ast.Call:
    return ast.Call(func=name(function), args=list(args), keywords=[])


def abc_attribute(attr: str) -> ast.expr:
    """`__import__('collections.abc').abc.<attr>`: usable without an import statement."""
    module = call_named("__import__", const("collections.abc"))
    return ast.Attribute(value=ast.Attribute(value=module, attr="abc", ctx=ast.Load()), attr=attr, ctx=ast.Load())


def assertion_error_name() -> ast.Name:
    """AssertionError as LOAD_ASSERTION_ERROR loads it: marked, so the raise can become `assert`.
    (A plain attribute, not a subclass: ast.unparse mishandles unknown node classes.)"""
    node = name("AssertionError")
    node.from_assert = True  # type: ignore[attr-defined]  # a marker attribute, read with getattr
    return node


def none_to_absent(node):
    """Slice bounds: a constant None is the same as leaving the bound out."""
    if isinstance(node, ast.Constant) and node.value is None:
        return None
    return node


def as_value(node: ast.expr) -> ast.expr:
    """A slice is only valid syntax inside brackets; anywhere else it is `slice(lower, upper, step)`."""
    if isinstance(node, ast.Slice):
        return call_named("slice", *(part or const(None) for part in (node.lower, node.upper, node.step)))
    return node


def as_tuple(node: ast.expr) -> ast.expr:
    if isinstance(node, ast.List):
        return ast.Tuple(elts=node.elts, ctx=ast.Load())
    return call_named("tuple", node)


def const_slice(key: ast.Slice, length: int):
    """(start, stop) of a constant, step-less slice over `length` items, else None."""
    parts: list[int | None] = []
    for bound in (key.lower, key.upper):
        if bound is None or (isinstance(bound, ast.Constant) and bound.value is None):
            parts.append(None)
        elif isinstance(bound, ast.Constant) and isinstance(bound.value, int):
            parts.append(bound.value)
        else:
            return None
    if key.step is not None:
        return None
    start, stop, _ = slice(*parts).indices(length)
    return start, max(start, stop)


def names_read(node: Any) -> set[str]:
    if isinstance(node, SymList):
        return set().union(*(names_read(i) for i in node.items)) if node.items else set()
    if isinstance(node, (Iter, LoopValue)):
        return names_read(node.iterable)
    if not isinstance(node, ast.AST):
        return set()
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def is_pure(node: Any) -> bool:
    """True when evaluating `node` later gives the same result unless one of its names is rebound."""
    if isinstance(node, (ast.Constant, ast.Name, ast.Lambda)):
        return True
    if isinstance(node, (ast.Tuple, ast.List)) and isinstance(node.ctx, ast.Load):
        return all(is_pure(e) for e in node.elts)
    if isinstance(node, ast.Slice):
        return all(part is None or is_pure(part) for part in (node.lower, node.upper, node.step))
    if isinstance(node, ast.NamedExpr):
        return False
    return is_marker(node) and not isinstance(node, (Inplace, Unpacked))


def same_target(a: ast.expr, b: ast.expr) -> bool:
    """Does store target `b` name the very place `a` was loaded from (`x.a += 1`, `x[i] += 1`)?"""
    if isinstance(a, ast.Name) and isinstance(b, ast.Name):
        return a.id == b.id
    if isinstance(a, ast.Attribute) and isinstance(b, ast.Attribute):
        return a.attr == b.attr and a.value is b.value
    if isinstance(a, ast.Subscript) and isinstance(b, ast.Subscript):
        return a.value is b.value and a.slice is b.slice
    return False


def same_scope_nodes(stmts: list):
    """Nodes of these statements, not descending into nested functions and classes."""
    todo = list(stmts)
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))
