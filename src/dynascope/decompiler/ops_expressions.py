"""Operators, comparisons, subscripts and f-string formatting."""

from __future__ import annotations

import ast

from dynascope.decompiler.machine import ExecutorBase
from dynascope.decompiler.nodes import BINOPS, COMPARES, UNARY, as_tuple, none_to_absent
from dynascope.decompiler.values import DecompileError, Inplace, SymList


class ExpressionOps(ExecutorBase):
    """Mixed into BlockExecutor: uses its stack helpers (push, pop, expr, emit, store)."""

    def op_BINARY_OP(self, ins):
        right, left = self.pop(), self.pop()
        op = ins.argval
        if op.endswith("=") and op not in ("==",):
            self.push(Inplace(op, self.expr(left), self.expr(right)))
            return
        self.push(ast.BinOp(left=self.expr(left), op=BINOPS[op](), right=self.expr(right)))

    def op_BINARY_SUBSCR(self, ins):
        key, container = self.pop(), self.pop()
        if isinstance(container, SymList) and not container.escaped:
            item = self.symlist_get(container, key)
            if item is not None:
                self.push(item)
                return
        self.push(ast.Subscript(value=self.expr(container), slice=self.expr(key), ctx=ast.Load()))

    def op_BUILD_SLICE(self, ins):
        parts = [none_to_absent(self.expr(v)) for v in self.popn(ins.arg)]
        self.push(ast.Slice(lower=parts[0], upper=parts[1], step=parts[2] if len(parts) > 2 else None))

    def op_COMPARE_OP(self, ins):
        right, left = self.pop(), self.pop()
        self.push(ast.Compare(left=self.expr(left), ops=[COMPARES[ins.argval]()], comparators=[self.expr(right)]))

    def op_IS_OP(self, ins):
        right, left = self.pop(), self.pop()
        op = ast.IsNot() if ins.arg else ast.Is()
        self.push(ast.Compare(left=self.expr(left), ops=[op], comparators=[self.expr(right)]))

    def op_CONTAINS_OP(self, ins):
        right, left = self.pop(), self.pop()
        op = ast.NotIn() if ins.arg else ast.In()
        self.push(ast.Compare(left=self.expr(left), ops=[op], comparators=[self.expr(right)]))

    def _unary(self, ins):
        self.push(ast.UnaryOp(op=UNARY[ins.name](), operand=self.expr(self.pop())))

    op_UNARY_NEGATIVE = op_UNARY_NOT = op_UNARY_INVERT = op_UNARY_POSITIVE = _unary

    def op_CALL_INTRINSIC_1(self, ins):
        kind = str(ins.argval)
        value = self.pop()
        if "UNARY_POSITIVE" in kind:
            self.push(ast.UnaryOp(op=ast.UAdd(), operand=self.expr(value)))
        elif "LIST_TO_TUPLE" in kind:
            self.push(as_tuple(self.expr(value)))
        elif "PRINT" in kind or "ASYNC_GEN_WRAP" in kind:
            self.push(value)
        else:
            raise DecompileError(f"unsupported intrinsic {kind}")

    def op_CONVERT_VALUE(self, ins):
        self.push(("converted", self.expr(self.pop()), ins.argval))

    def op_FORMAT(self, ins):
        conversion, has_spec = ins.argval
        spec = self.expr(self.pop()) if has_spec else None
        value = self.pop()
        if isinstance(value, tuple) and value and value[0] == "converted":
            _, value, conversion = value
        if spec is not None and not isinstance(spec, ast.JoinedStr):
            spec = ast.JoinedStr(values=[spec] if isinstance(spec, ast.Constant) else
                                 [ast.FormattedValue(value=spec, conversion=-1, format_spec=None)])
        self.push(ast.JoinedStr(values=[ast.FormattedValue(value=self.expr(value), conversion=conversion,
                                                           format_spec=spec)]))
