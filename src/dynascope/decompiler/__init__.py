"""Bytecode -> Python source for ordinary functions and the code TorchDynamo generates.

`decompile(obj)` returns the source of a `def` that compiles and behaves like `obj`'s code;
`decompile_or_dis(obj)` never raises and falls back to an annotated `dis` listing.
Imports nothing from torch: it runs on every CPython from 3.10 to 3.13.
"""

from __future__ import annotations

import ast
import builtins
import math
import sys
from types import CodeType
from typing import Any

from dynascope.decompiler.fallback import dis_listing
from dynascope.decompiler.function import function_def
from dynascope.decompiler.opcodes import SUPPORTED_VERSIONS, VERSION
from dynascope.decompiler.values import DecompileError

__all__ = ["DecompileError", "decompile", "decompile_or_dis"]


def _code_of(obj: Any) -> tuple[CodeType, Any]:
    """The code object, plus the function it came from (for defaults), if any."""
    if isinstance(obj, CodeType):
        return obj, None
    func = getattr(obj, "__func__", obj)  # bound methods
    code = getattr(func, "__code__", None)
    if isinstance(code, CodeType):
        return code, func
    raise DecompileError(f"cannot decompile {type(obj).__name__}: pass a function, method or code object")


def _defaults(func: Any) -> tuple[list, dict]:
    if func is None:
        return [], {}
    scope = {**vars(builtins), **getattr(func, "__globals__", {})}
    defaults = [_default_expr(v, scope) for v in (getattr(func, "__defaults__", None) or ())]
    kwdefaults = {k: _default_expr(v, scope) for k, v in (getattr(func, "__kwdefaults__", None) or {}).items()}
    return defaults, kwdefaults


def _default_expr(value: Any, scope: dict) -> ast.expr:
    """A default value as source: a literal, or the global/builtin name bound to that very object."""
    text = repr(value)
    try:
        if ast.literal_eval(text) == value:
            return ast.parse(text, mode="eval").body
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    for name, bound in scope.items():
        if bound is value and name.isidentifier():
            return ast.Name(id=name, ctx=ast.Load())
    raise DecompileError(f"default value {text[:60]} has neither a literal form nor a global name")


def decompile(obj: Any) -> str:
    """Python source of a `def` equivalent to `obj` (function, method, or code object)."""
    code, func = _code_of(obj)
    if VERSION not in SUPPORTED_VERSIONS:
        raise DecompileError(f"Python {VERSION[0]}.{VERSION[1]} bytecode is not supported")
    defaults, kwdefaults = _defaults(func)
    def_name = code.co_name if code.co_name.isidentifier() else "__decompiled__"
    try:
        node = _closure_if_needed(function_def(code, def_name, defaults, kwdefaults), code)
        module = _NegativeNumbers().visit(ast.Module(body=[node], type_ignores=[]))
        source = ast.unparse(ast.fix_missing_locations(module))
        compile(source, "<decompiled>", "exec")
    except DecompileError:
        raise
    except Exception as exc:
        raise DecompileError(f"internal: {type(exc).__name__}: {exc}") from exc
    return source + "\n"


def _closure_if_needed(node: ast.FunctionDef | ast.AsyncFunctionDef,
                       code: CodeType) -> ast.FunctionDef | ast.AsyncFunctionDef:
    """A function that assigns its free variables needs `nonlocal`, which only compiles inside an
    enclosing function, one that passes the cell of a free variable on needs that cell to exist, and so
    does a method calling `super()`:
    return `def __closure_<name>(<free vars>): def <name>...; return <name>`."""
    if (not any(isinstance(stmt, ast.Nonlocal) for stmt in node.body) and not _reads_free_cells(node, code)
            and "__class__" not in code.co_freevars):  # zero-argument super() needs that cell
        return node
    params = ast.arguments(posonlyargs=[], args=[ast.arg(arg=v) for v in code.co_freevars], vararg=None,
                           kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])
    wrapper = ast.FunctionDef(name=f"__closure_{node.name}", args=params,
                              body=[node, ast.Return(value=ast.Name(id=node.name, ctx=ast.Load()))],
                              decorator_list=[], returns=None, type_comment=None, lineno=0)
    if sys.version_info >= (3, 12):
        wrapper.type_params = []
    return wrapper


def _reads_free_cells(node: ast.FunctionDef | ast.AsyncFunctionDef, code: CodeType) -> bool:
    """Does the body take a free variable's cell (`(lambda: v).__closure__[0]`, from LOAD_CLOSURE)?"""
    return any(isinstance(n, ast.Attribute) and n.attr == "__closure__" and isinstance(n.value, ast.Lambda)
               and isinstance(n.value.body, ast.Name) and n.value.body.id in code.co_freevars for n in ast.walk(node))


class _NegativeNumbers(ast.NodeTransformer):
    """ast.unparse writes the folded constant -1 as `-1` even where that parses differently:
    `(-1) ** x` would come out as `-1 ** x`, `(-1).real` as `-1 .real`.  As `-(1)` it is bracketed."""

    def visit_Constant(self, node):
        value = node.value
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.copysign(1, value) < 0:
            return ast.UnaryOp(op=ast.USub(), operand=ast.Constant(value=-value))
        if isinstance(value, complex) and value.real == 0 and math.copysign(1, value.real) < 0:
            return ast.UnaryOp(op=ast.USub(), operand=ast.Constant(value=-value))
        return node


def decompile_or_dis(obj: Any) -> tuple[str, bool]:
    """(source, True), or (annotated dis listing saying why decompiling failed, False). Never raises."""
    try:
        return decompile(obj), True
    except Exception as exc:  # noqa: BLE001 - the report must always get something to show
        try:
            code, _ = _code_of(obj)
        except DecompileError:
            return f"# dynascope could not decompile {obj!r}: {exc}\n", False
        return dis_listing(code, f"{type(exc).__name__}: {exc}"), False
