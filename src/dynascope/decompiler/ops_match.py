"""`match` statements, written as the explicit tests the MATCH_* opcodes perform."""

from __future__ import annotations

import ast

from dynascope.decompiler.machine import ExecutorBase
from dynascope.decompiler.nodes import abc_attribute, call_named, const, name
from dynascope.decompiler.opcodes import FEATURES
from dynascope.decompiler.values import DecompileError


class PatternOps(ExecutorBase):
    """Mixed into BlockExecutor: uses its stack helpers (push, pop, expr, emit, store)."""

    def op_MATCH_SEQUENCE(self, ins):
        subject = self.expr(self.stack[-1])
        abc = abc_attribute("Sequence")
        text_types = ast.Tuple(elts=[name("str"), name("bytes"), name("bytearray")], ctx=ast.Load())
        self.push(ast.BoolOp(op=ast.And(), values=[
            call_named("isinstance", subject, abc),
            ast.UnaryOp(op=ast.Not(), operand=call_named("isinstance", subject, text_types))]))

    def op_MATCH_MAPPING(self, ins):
        self.push(call_named("isinstance", self.expr(self.stack[-1]), abc_attribute("Mapping")))

    def op_GET_LEN(self, ins):
        self.push(call_named("len", self.expr(self.stack[-1])))

    def op_MATCH_KEYS(self, ins):
        keys, subject = self.expr(self.stack[-1]), self.expr(self.stack[-2])
        if not isinstance(keys, ast.Constant) or not isinstance(keys.value, tuple):
            raise DecompileError("match mapping pattern with computed keys")
        present = [ast.Compare(left=const(k), ops=[ast.In()], comparators=[subject]) for k in keys.value]
        values = ast.Tuple(elts=[ast.Subscript(value=subject, slice=const(k), ctx=ast.Load()) for k in keys.value],
                           ctx=ast.Load())
        test = present[0] if len(present) == 1 else ast.BoolOp(op=ast.And(), values=present)
        self.push_match_result(ast.IfExp(test=test, body=values, orelse=const(None)) if present else values)

    def push_match_result(self, values: ast.expr) -> None:
        self.push(values)
        if FEATURES["match_pushes_bool"]:
            self.push(ast.Compare(left=values, ops=[ast.IsNot()], comparators=[const(None)]))

    def op_MATCH_CLASS(self, ins):
        """`case C(p0, p1, k=p2)`: positional sub-patterns read `C.__match_args__` (or, for the
        builtins that match themselves, the subject), keywords read attributes."""
        names, cls, subject = self.expr(self.pop()), self.expr(self.pop()), self.expr(self.pop())
        if not isinstance(names, ast.Constant) or not isinstance(names.value, tuple):
            raise DecompileError("match class pattern with computed attribute names")
        positional = self.positional_captures(ins.arg or 0, cls, subject)
        keywords = [ast.Attribute(value=subject, attr=a, ctx=ast.Load()) for a in names.value]
        tests: list[ast.expr] = [call_named("isinstance", subject, cls)]
        tests += [call_named("hasattr", subject, const(a)) for a in names.value]
        test = tests[0] if len(tests) == 1 else ast.BoolOp(op=ast.And(), values=tests)
        values = ast.Tuple(elts=positional + keywords, ctx=ast.Load())
        self.push_match_result(ast.IfExp(test=test, body=values, orelse=const(None)))

    def positional_captures(self, count: int, cls: ast.expr, subject: ast.expr) -> list:
        if count == 1 and isinstance(cls, ast.Name) and cls.id in SELF_MATCHING_BUILTINS:
            return [subject]
        match_args = ast.Attribute(value=cls, attr="__match_args__", ctx=ast.Load())
        return [call_named("getattr", subject, ast.Subscript(value=match_args, slice=const(i), ctx=ast.Load()))
                for i in range(count)]


SELF_MATCHING_BUILTINS = frozenset({
    "bool", "bytearray", "bytes", "dict", "float", "frozenset", "int", "list", "set", "str", "tuple",
})
