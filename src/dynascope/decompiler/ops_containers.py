"""Tuples, lists, sets, dicts, unpacking and comprehension accumulators.

Lists Dynamo builds and reshuffles on the stack stay symbolic (`SymList`) item by item, so its
plumbing reads as plain call arguments."""

from __future__ import annotations

import ast

from dynascope.decompiler.machine import ExecutorBase
from dynascope.decompiler.nodes import as_tuple, const, const_slice, name
from dynascope.decompiler.values import (
    Accumulator,
    DecompileError,
    LoopValue,
    SymList,
    Unpacked,
    UnpackGroup,
    is_marker,
)


class ContainerOps(ExecutorBase):
    """Mixed into BlockExecutor: uses its stack helpers (push, pop, expr, emit, store)."""

    def op_BUILD_TUPLE(self, ins):
        self.push(ast.Tuple(elts=[self.expr(v) for v in self.popn(ins.arg)], ctx=ast.Load()))

    def start_accumulator(self, ins, kind: str) -> bool:
        if ins.arg or not self.frame.accumulator_pending:
            return False
        self.frame.accumulator_pending = False
        for i, value in enumerate(self.stack):  # an earlier inlined comprehension, already looped: done
            if isinstance(value, Accumulator) and value.out is self.out and len(self.out) > value.start:
                self.stack[i] = self.comprehension_of(value)
        self.push(Accumulator(kind, self.out, len(self.out)))
        return True

    def op_BUILD_LIST(self, ins):
        if not self.start_accumulator(ins, "list"):
            self.push(SymList(list(self.popn(ins.arg))))

    def op_BUILD_SET(self, ins):
        if self.start_accumulator(ins, "set"):
            return
        items = [self.expr(v) for v in self.popn(ins.arg)]
        self.push(ast.Set(elts=items) if items else ast.Call(func=name("set"), args=[], keywords=[]))

    def op_BUILD_MAP(self, ins):
        if self.start_accumulator(ins, "dict"):
            return
        flat = [self.expr(v) for v in self.popn(2 * ins.arg)]
        keys: list[ast.expr | None] = list(flat[0::2])
        self.push(ast.Dict(keys=keys, values=flat[1::2]))

    def op_BUILD_CONST_KEY_MAP(self, ins):
        keys = self.pop()
        values = [self.expr(v) for v in self.popn(ins.arg)]
        self.push(ast.Dict(keys=[const(k) for k in keys.value], values=values))

    def op_BUILD_STRING(self, ins):
        parts = []
        for v in self.popn(ins.arg):
            v = self.expr(v)
            if isinstance(v, ast.JoinedStr):
                parts.extend(v.values)
            else:
                parts.append(v if isinstance(v, (ast.Constant, ast.FormattedValue)) else
                             ast.FormattedValue(value=v, conversion=-1, format_spec=None))
        self.push(ast.JoinedStr(values=parts))

    def op_LIST_EXTEND(self, ins):
        value = self.pop()
        target = self.stack[-ins.arg]
        if isinstance(target, SymList) and not target.escaped:
            if isinstance(value, SymList) and not value.escaped:
                target.items.extend(value.items)
                return
            target.items.append(ast.Starred(value=self.expr(value), ctx=ast.Load()))
            return
        if isinstance(target, Accumulator):
            raise DecompileError("LIST_EXTEND on a comprehension accumulator")
        self.stack.append(value)
        self.flush()  # the list stays on the stack: save it first, or it would be computed twice
        value, target = self.pop(), self.stack[-ins.arg]
        self.emit(ast.Expr(value=ast.Call(func=ast.Attribute(value=self.expr(target), attr="extend", ctx=ast.Load()),
                                          args=[self.expr(value)], keywords=[])))

    def op_SET_UPDATE(self, ins):
        """`{a, *b}` and set displays of constants (built as `set()` then updated with a frozenset)."""
        value = self.expr(self.pop())
        target = self.expr(self.stack[-ins.arg])
        if isinstance(value, ast.Constant) and isinstance(value.value, frozenset):
            items = [const(v) for v in value.value]
        elif isinstance(value, (ast.Tuple, ast.Set)):
            items = list(value.elts)
        else:
            items = [ast.Starred(value=value, ctx=ast.Load())]
        if isinstance(target, ast.Set):
            target.elts.extend(items)
        elif isinstance(target, ast.Call) and not target.args:  # the empty `set()`
            self.stack[-ins.arg] = ast.Set(elts=items)
        else:
            raise DecompileError("SET_UPDATE on an unknown set")

    def op_DICT_UPDATE(self, ins):
        value = self.pop()
        target = self.stack[-ins.arg]
        if not isinstance(target, ast.Dict):
            raise DecompileError("DICT_UPDATE on an unknown dict")
        target.keys.append(None)
        target.values.append(self.expr(value))

    op_DICT_MERGE = op_DICT_UPDATE

    def op_LIST_TO_TUPLE(self, ins):
        self.push(as_tuple(self.expr(self.pop())))

    def op_LIST_APPEND(self, ins):
        value = self.pop()
        target = self.stack[-ins.arg]
        if isinstance(target, SymList) and not target.escaped:
            target.items.append(value)
            return
        if isinstance(target, Accumulator):
            self.out.append(ast.Expr(value=ast.Call(func=name("__append__"), args=[self.expr(value)], keywords=[])))
            return
        raise DecompileError("LIST_APPEND on an unknown list")

    def op_SET_ADD(self, ins):
        value = self.pop()
        target = self.stack[-ins.arg]
        if isinstance(target, ast.Set) or (isinstance(target, ast.Call) and _is_empty_set(target)):
            self.stack[-ins.arg] = ast.Set(elts=[*getattr(target, "elts", []), self.expr(value)])
            return  # a long set display is built one item at a time
        if not isinstance(target, Accumulator):
            raise DecompileError("SET_ADD outside a comprehension")
        self.out.append(ast.Expr(value=ast.Call(func=name("__append__"), args=[self.expr(value)], keywords=[])))

    def op_MAP_ADD(self, ins):
        value, key = self.pop(), self.pop()
        target = self.stack[-ins.arg]
        if isinstance(target, ast.Dict):  # a long dict display is built one item at a time
            target.keys.append(self.expr(key))
            target.values.append(self.expr(value))
            return
        if not isinstance(target, Accumulator):
            raise DecompileError("MAP_ADD outside a comprehension")
        self.out.append(ast.Expr(value=ast.Call(func=name("__append__"),
                                                args=[self.expr(key), self.expr(value)], keywords=[])))

    def op_UNPACK_SEQUENCE(self, ins):
        self.unpack(self.pop(), ins.arg, None)

    def op_UNPACK_EX(self, ins):
        before, after = ins.arg & 0xFF, ins.arg >> 8
        self.unpack(self.pop(), before + 1 + after, before)

    def unpack(self, source, count: int, star_index) -> None:
        parent = source if isinstance(source, Unpacked) else None
        group = UnpackGroup(source=source if parent is None else None, count=count, star_index=star_index,
                            parent=parent)
        if parent is None and not isinstance(source, LoopValue):
            group.source = self.expr(source) if not is_marker(source) or isinstance(source, SymList) else source
        for index in reversed(range(count)):
            self.push(Unpacked(group, index))

    def symlist_get(self, lst: SymList, key):
        if isinstance(key, ast.Constant) and isinstance(key.value, int):
            if -len(lst.items) <= key.value < len(lst.items):
                return lst.items[key.value]
            return None
        if isinstance(key, ast.Slice):
            bounds = const_slice(key, len(lst.items))
            if bounds is not None:
                return SymList(lst.items[bounds[0]:bounds[1]])
        return None

    def symlist_store(self, lst: SymList, key, value) -> bool:
        if isinstance(key, ast.Slice) and isinstance(value, SymList) and not value.escaped:
            bounds = const_slice(key, len(lst.items))
            if bounds is None:
                return False
            lst.items[bounds[0]:bounds[1]] = list(value.items)
            return True
        if (isinstance(key, ast.Constant) and isinstance(key.value, int)
                and -len(lst.items) <= key.value < len(lst.items)):
            lst.items[key.value] = value
            return True
        return False

    def symlist_delete(self, lst: SymList, key) -> bool:
        if (isinstance(key, ast.Constant) and isinstance(key.value, int)
                and -len(lst.items) <= key.value < len(lst.items)):
            del lst.items[key.value]
            return True
        return False


def _is_empty_set(node: ast.Call) -> bool:
    return isinstance(node.func, ast.Name) and node.func.id == "set" and not node.args and not node.keywords
