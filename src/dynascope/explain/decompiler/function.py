"""Code object -> `def` (or lambda, or comprehension) AST."""

from __future__ import annotations

import ast
import inspect
from types import CodeType
from typing import Any

from .cfg import ControlFlowGraph
from .comprehension import from_statements
from .executor import Frame
from .nodes import const
from .opcodes import VERSION
from .readable import tidy
from .structure import Structurer
from .values import DecompileError, FunctionValue, Iter

CO_VARARGS, CO_VARKEYWORDS = inspect.CO_VARARGS, inspect.CO_VARKEYWORDS
CO_GENERATOR, CO_COROUTINE, CO_ASYNC_GENERATOR = inspect.CO_GENERATOR, inspect.CO_COROUTINE, inspect.CO_ASYNC_GENERATOR


def function_body(code: CodeType) -> tuple[list, Frame]:
    if code.co_flags & (CO_COROUTINE | CO_ASYNC_GENERATOR):
        raise DecompileError("coroutines and async generators are not supported")
    frame = Frame(code, render_nested)
    body = Structurer(ControlFlowGraph(code), frame).function_body()
    declarations = []
    if frame.globals_declared:
        declarations.append(ast.Global(names=sorted(frame.globals_declared)))
    if frame.nonlocals_declared:
        declarations.append(ast.Nonlocal(names=sorted(frame.nonlocals_declared)))
    return declarations + tidy(body, code), frame


def arguments(code: CodeType, defaults: list, kwdefaults: dict) -> ast.arguments:
    names = list(code.co_varnames)
    pos = code.co_argcount
    posonly = code.co_posonlyargcount
    kwonly = code.co_kwonlyargcount
    i = pos + kwonly
    vararg = kwarg = None
    if code.co_flags & CO_VARARGS:
        vararg = ast.arg(arg=names[i])
        i += 1
    if code.co_flags & CO_VARKEYWORDS:
        kwarg = ast.arg(arg=names[i])
    kw_names = names[pos:pos + kwonly]
    return ast.arguments(
        posonlyargs=[ast.arg(arg=n) for n in names[:posonly]],
        args=[ast.arg(arg=n) for n in names[posonly:pos]],
        vararg=vararg,
        kwonlyargs=[ast.arg(arg=n) for n in kw_names],
        kw_defaults=[kwdefaults.get(n) for n in kw_names],
        kwarg=kwarg,
        defaults=list(defaults),
    )


def function_def(code: CodeType, def_name: str, defaults: list, kwdefaults: dict, decorators=()) -> ast.FunctionDef:
    body, _ = function_body(code)
    node = ast.FunctionDef(name=def_name, args=arguments(code, defaults, kwdefaults), body=body or [ast.Pass()],
                           decorator_list=list(decorators), returns=None, type_comment=None, lineno=0)
    if VERSION >= (3, 12):
        node.type_params = []
    return node


def render_nested(fn: FunctionValue, how: Any):
    """A MAKE_FUNCTION result rendered where it is used: def statement, lambda, or comprehension."""
    if isinstance(how, Iter):
        return comprehension(fn.code, how.iterable)
    if how == "<lambda>":
        return lambda_expr(fn)
    return function_def(fn.code, how, fn.defaults, fn.kwdefaults)


def lambda_expr(fn: FunctionValue) -> ast.Lambda:
    body, _ = function_body(fn.code)
    if len(body) != 1 or not isinstance(body[0], ast.Return):
        raise DecompileError("lambda whose body is not one expression")
    return ast.Lambda(args=arguments(fn.code, fn.defaults, fn.kwdefaults), body=body[0].value or const(None))


def comprehension(code: CodeType, iterable: ast.expr) -> ast.expr:
    """Rebuild `[elt for x in it if c]` from the nested code object's `for`/`if`/append tree."""
    frame = Frame(code, render_nested)
    body = Structurer(ControlFlowGraph(code), frame).function_body()
    if len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(body[0].value, COMPREHENSIONS):
        result = body[0].value
    else:
        result = from_statements(body, code.co_name)
    first = result.generators[0]
    if isinstance(first.iter, ast.Name) and first.iter.id == ".0":
        first.iter = iterable
    return result


COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
