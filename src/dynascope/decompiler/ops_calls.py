"""Calls (every version's protocol), function creation and imports."""

from __future__ import annotations

import ast
import inspect

from dynascope.decompiler.machine import ExecutorBase
from dynascope.decompiler.nodes import const
from dynascope.decompiler.opcodes import FEATURES, VERSION
from dynascope.decompiler.values import (
    NULL,
    BuildClass,
    ClassValue,
    DecompileError,
    FunctionValue,
    ImportedModule,
    ImportedName,
    Iter,
    SymList,
    WithExit,
    WithExitDone,
)


class CallOps(ExecutorBase):
    """Mixed into BlockExecutor: uses its stack helpers (push, pop, expr, emit, store)."""

    def op_KW_NAMES(self, ins):
        self.kwnames = ins.argval if isinstance(ins.argval, tuple) else self.frame.code.co_consts[ins.arg]

    def op_CALL(self, ins):
        self.call(ins.arg, self.kwnames)
        self.kwnames = ()

    def op_CALL_KW(self, ins):
        names = self.pop()
        self.call(ins.arg, tuple(names.value))

    def op_CALL_LEGACY(self, ins):
        self.call(ins.arg, (), legacy=True)

    def op_CALL_METHOD_LEGACY(self, ins):
        self.call(ins.arg, ())

    def op_CALL_KW_LEGACY(self, ins):
        names = self.pop()
        self.call(ins.arg, tuple(names.value), legacy=True)

    def call(self, argc: int, kwnames: tuple, legacy: bool = False) -> None:
        args = self.popn(argc)
        if legacy:
            func = self.pop()
        else:
            first, second = self.pop(), self.pop()
            if first is NULL:
                func = second
            elif second is NULL:
                func = first
            else:  # method call with explicit self: callable, self, args...
                func, args = second, [first, *args]
        if isinstance(func, WithExit):
            self.push(WithExitDone())
            return
        positional = args[: len(args) - len(kwnames)]
        keywords = [ast.keyword(arg=k, value=self.expr(v))
                    for k, v in zip(kwnames, args[len(positional):], strict=False)]
        if isinstance(func, BuildClass):
            self.push(self.class_value(positional, keywords))
            return
        if (isinstance(func, FunctionValue) and positional and isinstance(positional[0], Iter)
                and _is_comprehension(func)):
            node = self.frame.render_function(func, positional[0])
            node.awaited_by_syntax = bool(func.code.co_flags & inspect.CO_COROUTINE)  # 3.10/3.11 await it
            self.push(node)
            return
        self.push(ast.Call(func=self.expr(func), args=[self.expr(a) for a in positional], keywords=keywords))

    def class_value(self, args: list, keywords: list) -> ClassValue:
        """`__build_class__(body, name, *bases, **keywords)`: a class statement."""
        if len(args) < 2 or not isinstance(args[0], FunctionValue) or not isinstance(args[1], ast.Constant):
            raise DecompileError("__build_class__ called another way than a class statement does")
        class_name = args[1].value
        if args[0].defaults or args[0].kwdefaults or not (isinstance(class_name, str) and class_name.isidentifier()):
            raise DecompileError("unrecognised class statement")
        return ClassValue(args[0], class_name, [self.expr(b) for b in args[2:]], keywords)

    def op_CALL_FUNCTION_EX(self, ins):
        kwargs = self.pop() if ins.arg & 1 else None
        args = self.pop()
        first = self.pop()
        if first is NULL:
            func = self.pop()
        else:
            func = first
            if FEATURES["global_null"] and self.stack and self.stack[-1] is NULL:
                self.pop()
        call_args = self.star_args(args)
        keywords = self.star_kwargs(kwargs) if kwargs is not None else []
        self.push(ast.Call(func=self.expr(func), args=call_args, keywords=keywords))

    def star_args(self, args) -> list:
        if isinstance(args, SymList) and not args.escaped:
            args.escaped = True
            return [self.expr(a) for a in args.items]
        args = self.expr(args)
        if isinstance(args, ast.Tuple):
            return list(args.elts)
        if isinstance(args, ast.Constant) and isinstance(args.value, tuple):
            return [const(v) for v in args.value]
        if isinstance(args, ast.List):
            return list(args.elts)
        return [ast.Starred(value=args, ctx=ast.Load())]

    def star_kwargs(self, kwargs) -> list:
        kwargs = self.expr(kwargs)
        if isinstance(kwargs, ast.Dict):
            result = []
            for k, v in zip(kwargs.keys, kwargs.values, strict=False):
                if k is None:
                    result.append(ast.keyword(arg=None, value=v))
                elif isinstance(k, ast.Constant) and isinstance(k.value, str) and k.value.isidentifier():
                    result.append(ast.keyword(arg=k.value, value=v))
                else:
                    return [ast.keyword(arg=None, value=kwargs)]
            return result
        return [ast.keyword(arg=None, value=kwargs)]

    def op_MAKE_FUNCTION(self, ins):
        code_value = self.pop()
        if VERSION == (3, 10):  # 3.10 pushes the qualified name above the code
            code_value = self.pop()
        fn = FunctionValue(code=code_value.value)
        flags = ins.arg or 0
        if flags & 0x08:
            self.pop()  # closure cells: the nested def reads the same names
        if flags & 0x04:
            fn.annotations = self.pop()
        if flags & 0x02:
            fn.kwdefaults = self.kwdefaults(self.pop())
        if flags & 0x01:
            fn.defaults = self.defaults(self.pop())
        self.push(fn)

    def op_SET_FUNCTION_ATTRIBUTE(self, ins):
        fn, value = self.pop(), self.pop()
        if ins.arg == 0x01:
            fn.defaults = self.defaults(value)
        elif ins.arg == 0x02:
            fn.kwdefaults = self.kwdefaults(value)
        elif ins.arg == 0x04:
            fn.annotations = value
        self.push(fn)

    def defaults(self, value) -> list:
        value = self.expr(value)
        if isinstance(value, ast.Tuple):
            return list(value.elts)
        return [const(v) for v in value.value]

    def kwdefaults(self, value) -> dict:
        value = self.expr(value)
        return {k.value: v for k, v in zip(value.keys, value.values, strict=False)}

    def op_IMPORT_NAME(self, ins):
        fromlist, level = self.expr(self.pop()), self.expr(self.pop())
        # both are LOAD_CONSTs (an int level); anything else failed on `.value` below before this assert
        assert isinstance(fromlist, ast.Constant) and isinstance(level, ast.Constant) and isinstance(level.value, int)
        self.push(ImportedModule(ins.argval, fromlist.value, level.value))

    def op_IMPORT_FROM(self, ins):
        module = self.stack[-1]
        if not isinstance(module, ImportedModule):
            raise DecompileError("IMPORT_FROM without IMPORT_NAME")
        self.push(ImportedName(module, ins.argval))

    def import_statement(self, target: ast.expr, value) -> ast.stmt | None:
        """`import m` / `import m as x` / `from m import n as x`, when the store allows it."""
        if not isinstance(target, ast.Name):
            return None
        if isinstance(value, ImportedModule) and value.fromlist is None and value.level == 0:
            top = value.name.split(".")[0]
            if target.id == top:
                return ast.Import(names=[ast.alias(name=value.name)])
            if "." not in value.name:
                return ast.Import(names=[ast.alias(name=value.name, asname=target.id)])
        if isinstance(value, ImportedName) and value.module.fromlist is not None:
            alias = ast.alias(name=value.name, asname=None if target.id == value.name else target.id)
            return ast.ImportFrom(module=value.module.name or None, names=[alias], level=value.module.level)
        if isinstance(value, ImportedName) and value.module.level == 0 and value.module.name.endswith("." + value.name):
            return ast.Import(names=[ast.alias(name=value.module.name, asname=target.id)])  # import a.b as c
        return None


def _is_comprehension(fn: FunctionValue) -> bool:
    return fn.code.co_name in ("<listcomp>", "<setcomp>", "<dictcomp>", "<genexpr>")
