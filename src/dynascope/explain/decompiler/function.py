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
from .values import ClassValue, DecompileError, FunctionValue, Iter

CO_VARARGS, CO_VARKEYWORDS = inspect.CO_VARARGS, inspect.CO_VARKEYWORDS
CO_GENERATOR, CO_COROUTINE, CO_ASYNC_GENERATOR = inspect.CO_GENERATOR, inspect.CO_COROUTINE, inspect.CO_ASYNC_GENERATOR


def function_body(code: CodeType) -> tuple[list, Frame]:
    frame = Frame(code, render_nested)
    body = Structurer(ControlFlowGraph(code), frame).function_body()
    declarations = []
    if frame.globals_declared:
        declarations.append(ast.Global(names=sorted(frame.globals_declared)))
    if frame.nonlocals_declared:
        declarations.append(ast.Nonlocal(names=sorted(frame.nonlocals_declared)))
    body = declarations + tidy(body, code)
    if code.co_flags & CO_ASYNC_GENERATOR:
        _BareReturns().visit(ast.Module(body=body, type_ignores=[]))
        if len(body) > 1 and isinstance(body[-1], ast.Return):
            body.pop()
    return body, frame


class _BareReturns(ast.NodeVisitor):
    """An async generator can only `return` without a value (its code returns None)."""

    def visit_Return(self, node):
        if isinstance(node.value, ast.Constant) and node.value.value is None:
            node.value = None
        elif node.value is not None:
            raise DecompileError("async generator returning a value")

    def visit_FunctionDef(self, node):
        pass  # nested functions have their own returns

    visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = visit_FunctionDef


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


def function_def(code: CodeType, def_name: str, defaults: list, kwdefaults: dict, decorators=()) -> ast.stmt:
    body, _ = function_body(code)
    kind = ast.AsyncFunctionDef if code.co_flags & (CO_COROUTINE | CO_ASYNC_GENERATOR) else ast.FunctionDef
    node = kind(name=def_name, args=arguments(code, defaults, kwdefaults), body=body or [ast.Pass()],
                           decorator_list=list(decorators), returns=None, type_comment=None, lineno=0)
    if VERSION >= (3, 12):
        node.type_params = []
    return node


def render_nested(fn: FunctionValue | ClassValue, how: Any):
    """A MAKE_FUNCTION result rendered where it is used: def statement, lambda, or comprehension;
    or a class statement."""
    if isinstance(fn, ClassValue):
        return class_def(fn)
    if isinstance(how, Iter):
        return comprehension(fn.code, how.iterable)
    if how == "<lambda>":
        return lambda_expr(fn)
    return function_def(fn.code, how, fn.defaults, fn.kwdefaults)


# what the compiler stores in every class namespace; the class statement implies it
CLASS_PROLOGUE = ("__module__", "__qualname__", "__firstlineno__")
CLASS_EPILOGUE = ("__static_attributes__", "__classcell__")


def class_def(cls: ClassValue) -> ast.ClassDef:
    body, _ = function_body(cls.body.code)
    declarations = [s for s in body if isinstance(s, (ast.Global, ast.Nonlocal))]
    body = body[len(declarations):]
    if body and _returns_namespace_result(body[-1]):
        body.pop()
    else:
        raise DecompileError("class body that does not end the way the compiler ends one")
    for names, where in ((CLASS_PROLOGUE, 0), (CLASS_EPILOGUE, -1)):
        while body and _assigns_one_of(body[where], names):
            body.pop(where)
    if body and _assigns_one_of(body[0], ("__doc__",)) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body[0] = ast.Expr(value=body[0].value)  # the docstring
    node = ast.ClassDef(name=cls.name, bases=cls.bases, keywords=cls.keywords, body=declarations + body or [ast.Pass()],
                        decorator_list=[])
    if VERSION >= (3, 12):
        node.type_params = []
    return node


def _assigns_one_of(stmt, names) -> bool:
    return (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and stmt.targets[0].id in names)


def _returns_namespace_result(stmt) -> bool:
    """`return None`, or `return __class__` after `__classcell__ = __class__` (perhaps a walrus)."""
    if not isinstance(stmt, ast.Return):
        return False
    value = stmt.value
    if isinstance(value, ast.NamedExpr) and value.target.id == "__classcell__":
        value = value.value
    return value is None or (isinstance(value, ast.Constant) and value.value is None) or \
        (isinstance(value, ast.Name) and value.id == "__class__")


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
