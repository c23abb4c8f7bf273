"""Code object -> `def` (or lambda, or comprehension) AST."""

from __future__ import annotations
import __future__

import ast
import copy
import dis
import inspect
import sys
from types import CodeType
from typing import Any

from dynascope.decompiler.cfg import ControlFlowGraph
from dynascope.decompiler.comprehension import Comprehension, from_statements
from dynascope.decompiler.executor import Frame
from dynascope.decompiler.nodes import const, name, same_scope_nodes
from dynascope.decompiler.readable import tidy
from dynascope.decompiler.structure import Structurer
from dynascope.decompiler.values import ClassValue, DecompileError, FunctionValue, Iter

CO_VARARGS, CO_VARKEYWORDS = inspect.CO_VARARGS, inspect.CO_VARKEYWORDS
CO_GENERATOR, CO_COROUTINE, CO_ASYNC_GENERATOR = inspect.CO_GENERATOR, inspect.CO_COROUTINE, inspect.CO_ASYNC_GENERATOR
CO_FUTURE_ANNOTATIONS = __future__.annotations.compiler_flag


def function_body(code: CodeType) -> tuple[list, Frame]:
    frame = Frame(code, render_nested)
    body = Structurer(ControlFlowGraph(code), frame).function_body()
    declarations: list[ast.stmt] = []
    if frame.globals_declared:
        declarations.append(ast.Global(names=sorted(frame.globals_declared)))
    if frame.nonlocals_declared:
        declarations.append(ast.Nonlocal(names=sorted(frame.nonlocals_declared)))
    body = tidy(declarations + body, code)  # tidying must see what `global`/`nonlocal` makes visible
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


def function_def(code: CodeType, def_name: str, defaults: list, kwdefaults: dict,
                 decorators=()) -> ast.FunctionDef | ast.AsyncFunctionDef:
    body, _ = function_body(code)
    kind = ast.AsyncFunctionDef if code.co_flags & (CO_COROUTINE | CO_ASYNC_GENERATOR) else ast.FunctionDef
    node = kind(name=def_name, args=arguments(code, defaults, kwdefaults), body=body or [ast.Pass()],
                           decorator_list=list(decorators), returns=None, type_comment=None, lineno=0)
    if sys.version_info >= (3, 12):
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
    node = function_def(fn.code, how, fn.defaults, fn.kwdefaults)
    if fn.annotations is not None:
        annotate(node, fn.annotations, fn.code)
    return node


def annotate(node: ast.FunctionDef | ast.AsyncFunctionDef, annotations: Any, code: CodeType) -> None:
    """MAKE_FUNCTION's annotations (a flat name, value, name, value... tuple) onto the def."""
    if isinstance(annotations, ast.Constant) and isinstance(annotations.value, tuple):
        flat = [const(v) for v in annotations.value]
    elif isinstance(annotations, ast.Tuple):
        flat = list(annotations.elts)
    else:
        raise DecompileError("function annotations in an unknown form")
    args = node.args
    params = {a.arg: a for a in args.posonlyargs + args.args + args.kwonlyargs + [args.vararg, args.kwarg] if a}
    for key, value in zip(flat[0::2], flat[1::2], strict=False):
        value = annotation_expr(value, code)
        if not isinstance(key, ast.Constant) or (key.value != "return" and key.value not in params):
            raise DecompileError("function annotation for an unknown parameter")
        if key.value == "return":
            node.returns = value
        else:
            params[key.value].annotation = value


def annotation_expr(value: ast.expr, code: CodeType) -> ast.expr:
    """Under `from __future__ import annotations` the compiler stored the annotation's source text;
    give back that source, which the same future import turns into the same text again."""
    if code.co_flags & CO_FUTURE_ANNOTATIONS and isinstance(value, ast.Constant) and isinstance(value.value, str):
        try:
            return ast.parse(value.value, mode="eval").body
        except SyntaxError:
            raise DecompileError("annotation text that does not parse") from None
    return value


# what the compiler stores in every class namespace; the class statement implies it
CLASS_PROLOGUE = ("__module__", "__qualname__", "__firstlineno__")
CLASS_EPILOGUE = ("__static_attributes__", "__classcell__")


def class_def(cls: ClassValue) -> ast.ClassDef:
    code = cls.body.code
    body, _ = function_body(code)
    declarations = [s for s in body if isinstance(s, (ast.Global, ast.Nonlocal))]
    body = _without_namespace_returns(body[len(declarations):])
    if any(isinstance(n, ast.Return) for n in same_scope_nodes(body)):
        raise DecompileError("class body that does not end the way the compiler ends one")
    if any(i.opname == "SETUP_ANNOTATIONS" for i in dis.get_instructions(code)):
        body = [_AnnotationStores(code).visit(stmt) for stmt in body]
    for names, where in ((CLASS_PROLOGUE, 0), (CLASS_EPILOGUE, -1)):
        while body and _assigns_one_of(body[where], names):
            body.pop(where)
    if body and _assigns_one_of(body[0], ("__doc__",)) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body[0] = ast.Expr(value=body[0].value)  # the docstring
    node = ast.ClassDef(name=cls.name, bases=cls.bases, keywords=cls.keywords, body=declarations + body or [ast.Pass()],
                        decorator_list=[])
    if sys.version_info >= (3, 12):
        node.type_params = []
    return node


def _without_namespace_returns(stmts: list) -> list:
    """The class body without the compiler's final `return` (CPython copies it onto each path that
    reaches the end: `if c: a; return` + `b; return` becomes `if c: a else: b`)."""
    out: list[ast.stmt] = []
    for i, stmt in enumerate(stmts):
        if _returns_namespace_result(stmt) or _is_epilogue(stmts[i:]):
            return out
        if isinstance(stmt, ast.If) and (_ends_in_return(stmt.body) or _ends_in_return(stmt.orelse)):
            rest = stmts[i + 1:]
            stmt.body = _without_namespace_returns(stmt.body + copy.deepcopy(rest)) or [ast.Pass()]
            stmt.orelse = _without_namespace_returns(stmt.orelse + rest)
            return [*out, stmt]
        out.append(stmt)
    return out


def _is_epilogue(stmts: list) -> bool:
    """`__static_attributes__ = ...` (3.13), `__classcell__ = ...`, then the final return."""
    count = 0
    while count < len(stmts) and _assigns_one_of(stmts[count], CLASS_EPILOGUE):
        count += 1
    return 0 < count < len(stmts) and _returns_namespace_result(stmts[count])


def _ends_in_return(stmts: list) -> bool:
    last = stmts[-1] if stmts else None
    if isinstance(last, ast.If):
        return _ends_in_return(last.body) or _ends_in_return(last.orelse)
    return isinstance(last, ast.Return)



class _AnnotationStores(ast.NodeTransformer):
    """In a class body (SETUP_ANNOTATIONS), `__annotations__['x'] = T` is what `x: T` compiles to."""

    def __init__(self, code: CodeType):
        self.code = code

    def visit_Assign(self, node):
        target = node.targets[0] if len(node.targets) == 1 else None
        if (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)
                and target.value.id == "__annotations__" and isinstance(target.slice, ast.Constant)
                and isinstance(target.slice.value, str) and target.slice.value.isidentifier()):
            return ast.AnnAssign(target=name(target.slice.value, ast.Store()),
                                 annotation=annotation_expr(node.value, self.code), value=None, simple=1)
        return node

    def visit_FunctionDef(self, node):
        return node

    visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = visit_FunctionDef


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
    return value is None or (isinstance(value, ast.Constant) and value.value is None) or _is_class_cell(value)


def _is_class_cell(value) -> bool:
    """`__class__`, or its cell as LOAD_CLOSURE renders it: `(lambda: __class__).__closure__[0]`."""
    if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Attribute) \
            and value.value.attr == "__closure__" and isinstance(value.value.value, ast.Lambda):
        value = value.value.value.body
    return isinstance(value, ast.Name) and value.id == "__class__"


def lambda_expr(fn: FunctionValue) -> ast.Lambda:
    body, _ = function_body(fn.code)
    if len(body) != 1 or not isinstance(body[0], ast.Return):
        raise DecompileError("lambda whose body is not one expression")
    return ast.Lambda(args=arguments(fn.code, fn.defaults, fn.kwdefaults), body=body[0].value or const(None))


def comprehension(code: CodeType, iterable: ast.expr) -> ast.expr:
    """Rebuild `[elt for x in it if c]` from the nested code object's `for`/`if`/append tree."""
    frame = Frame(code, render_nested)
    body = Structurer(ControlFlowGraph(code), frame).function_body()
    result: Comprehension
    if len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(body[0].value, COMPREHENSIONS):
        result = body[0].value
    else:
        result = from_statements(body, code.co_name)
    first = result.generators[0]
    if isinstance(first.iter, ast.Name) and first.iter.id == ".0":
        first.iter = iterable
    return result


COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
