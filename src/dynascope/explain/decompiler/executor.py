"""Symbolic execution of straight-line canonical instructions into Python AST.

The operand stack holds `ast.expr` nodes (and the markers of `values.py`).  An expression is left on
the stack, unevaluated, only while deferring it cannot change what it computes: before a statement
is emitted, anything the statement could disturb is first saved to a temporary.
"""

from __future__ import annotations

import ast
from types import CodeType
from typing import Any, Callable

from .opcodes import FEATURES, VERSION, Instr
from .values import (
    Accumulator, DecompileError, ExcInfo, FunctionValue, ImportedModule, ImportedName, Inplace, Iter, LoopValue,
    Null, SavedLocal, SymList, Unpacked, UnpackGroup, WithEnter, WithExit, WithExitDone, is_marker,
)

NULL = Null()

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


SIMPLE_STORES = ("STORE_FAST", "STORE_DEREF", "STORE_GLOBAL", "STORE_NAME")


def assertion_error_name() -> ast.Name:
    """AssertionError as LOAD_ASSERTION_ERROR loads it: marked, so the raise can become `assert`.
    (A plain attribute, not a subclass: ast.unparse mishandles unknown node classes.)"""
    node = name("AssertionError")
    node.from_assert = True
    return node


def name(identifier: str, ctx=None) -> ast.Name:
    return ast.Name(id=identifier, ctx=ctx or ast.Load())


def const(value: Any) -> ast.expr:
    return ast.Constant(value=value)


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
    if isinstance(node, ast.NamedExpr):
        return False
    return is_marker(node) and not isinstance(node, (Inplace, Unpacked))


class Frame:
    """Code-object facts every block needs: names, kinds of variables, nested function rendering."""

    def __init__(self, code: CodeType, render_function: Callable[[FunctionValue, str], ast.stmt]):
        self.code = code
        self.render_function = render_function
        self.temp_count = 0
        self.globals_declared: set[str] = set()
        # the next empty BUILD_LIST/SET/MAP starts a comprehension (set for comprehension code,
        # and by LOAD_FAST_AND_CLEAR where 3.12+ inlines comprehensions)
        self.accumulator_pending = code.co_name in ("<listcomp>", "<setcomp>", "<dictcomp>")
        self.nonlocals_declared: set[str] = set()

    def new_temp(self) -> str:
        self.temp_count += 1
        return f"__t{self.temp_count}"


class BlockExecutor:
    """Runs canonical instructions on a symbolic stack, appending statements to `out`."""

    def __init__(self, frame: Frame, stack: list, out: list):
        self.frame = frame
        self.stack = stack
        self.out = out
        self.kwnames: tuple = ()
        self.loop_target: Any = None  # set when the loop value gets stored
        self.returned = False
        self.left_handler = False
        self.saved_as: dict[int, tuple] = {}

    # ---- stack helpers -------------------------------------------------------------------
    def push(self, value: Any) -> None:
        self.stack.append(value)

    def pop(self) -> Any:
        if not self.stack:
            raise DecompileError("stack underflow")
        return self.stack.pop()

    def popn(self, n: int) -> list:
        if n == 0:
            return []
        if len(self.stack) < n:
            raise DecompileError("stack underflow")
        values = self.stack[-n:]
        del self.stack[-n:]
        return values

    def expr(self, value: Any) -> ast.expr:
        """The value as an expression; markers that cannot stand in an expression are an error."""
        if isinstance(value, ast.AST):
            return value
        if isinstance(value, SymList):
            value.escaped = True
            return ast.List(elts=[self.expr(i) for i in value.items], ctx=ast.Load())
        if isinstance(value, FunctionValue):
            return self.function_expr(value)
        if isinstance(value, Inplace):
            return self.inplace_call(value)
        if isinstance(value, Iter):
            return ast.Call(func=name("iter"), args=[value.iterable], keywords=[])
        if isinstance(value, Accumulator):
            return self.comprehension_of(value)
        if isinstance(value, ImportedModule):
            return _call("__import__", const(value.name), _call("globals"), const(None), const(value.fromlist),
                         const(value.level))
        if isinstance(value, ImportedName):
            return ast.Attribute(value=self.expr(value.module), attr=value.name, ctx=ast.Load())
        raise DecompileError(f"{type(value).__name__} used as a value")

    def comprehension_of(self, acc: Accumulator) -> ast.expr:
        from .comprehension import from_statements

        stmts = acc.out[acc.start:]
        del acc.out[acc.start:]
        return from_statements(stmts, acc.kind)

    def inplace_call(self, value: Inplace) -> ast.expr:
        func = ast.Attribute(value=ast.Call(func=name("__import__"), args=[const("operator")], keywords=[]),
                             attr=INPLACE_FUNCTIONS[value.op], ctx=ast.Load())
        return ast.Call(func=func, args=[value.target, value.value], keywords=[])

    def function_expr(self, fn: FunctionValue) -> ast.expr:
        if fn.code.co_name == "<lambda>":
            return self.frame.render_function(fn, "<lambda>")
        temp = fn.code.co_name if fn.code.co_name.isidentifier() else self.frame.new_temp()
        self.emit(self.frame.render_function(fn, temp), writes={temp})
        return name(temp)

    # ---- statements ----------------------------------------------------------------------
    def emit(self, stmt: ast.stmt, writes: set[str] = frozenset(), side_effects: bool = True) -> None:
        self.flush(writes, side_effects)
        self.out.append(stmt)

    def flush(self, writes: set[str] = frozenset(), side_effects: bool = True) -> None:
        """Save stack values the next statement could disturb into temporaries, in stack order.
        Values below a comprehension being rebuilt stay: the comprehension's loop statements
        become one expression evaluated after them, as in the original."""
        first = 0
        for i, value in enumerate(self.stack):
            if isinstance(value, Accumulator):
                first = i + 1
        for i in range(first, len(self.stack)):
            self.stack[i] = self.saved(self.stack[i], writes, side_effects)

    def saved(self, value: Any, writes, side_effects: bool) -> Any:
        if isinstance(value, SymList):
            value.items = [self.saved(v, writes, side_effects) for v in value.items]
            return value
        if isinstance(value, Iter):
            return value
        if is_marker(value):
            return value
        if is_pure(value) and not (names_read(value) & set(writes)):
            return value
        if not side_effects and not (names_read(value) & set(writes)):
            return value
        temp = self.frame.new_temp()
        self.out.append(ast.Assign(targets=[name(temp, ast.Store())], value=self.expr(value), lineno=0))
        self.replace_everywhere(value, name(temp))
        self.saved_as[id(value)] = (value, temp)
        return name(temp)

    def saved_name(self, value: Any) -> Any:
        """The temporary `value` was saved to by the last flush (or `value` itself)."""
        saved = self.saved_as.get(id(value))
        return name(saved[1]) if saved is not None and saved[0] is value else value

    def use_saved(self, node: ast.expr) -> ast.expr:
        """`node` with any sub-expression that was saved to a temporary replaced by it."""
        saved = self.saved_as

        class Substitute(ast.NodeTransformer):
            def visit(self, n):
                if id(n) in saved and saved[id(n)][0] is n:
                    return name(saved[id(n)][1])
                return super().visit(n)

        return Substitute().visit(node) if saved else node

    def replace_everywhere(self, old: Any, new: Any) -> None:
        for i, v in enumerate(self.stack):
            if v is old:
                self.stack[i] = new
            elif isinstance(v, SymList):
                v.items = [new if item is old else item for item in v.items]

    def store(self, target: ast.expr, value: Any, local: bool = False) -> None:
        """Assign `value` to `target`, turning the special cases back into their syntax."""
        target_names = {target.id} if isinstance(target, ast.Name) else set()
        if isinstance(value, SavedLocal):
            return  # an inlined comprehension restoring its loop variable
        if isinstance(value, LoopValue):
            self.loop_target = target
            return
        if isinstance(value, WithEnter):
            value.target = target
            return
        if isinstance(value, (ImportedModule, ImportedName)):
            statement = self.import_statement(target, value)
            if statement is not None:
                self.emit(statement, writes=target_names)
                return
        if isinstance(value, Unpacked):
            self.store_unpacked(target, value)
            return
        if isinstance(value, Inplace) and _same_target(value.target, target):
            self.emit(ast.AugAssign(target=target, op=BINOPS[value.op[:-1]](), value=value.value),
                      writes=target_names)
            return
        if isinstance(value, FunctionValue) and isinstance(target, ast.Name) and value.code.co_name == target.id:
            self.emit(self.frame.render_function(value, target.id), writes=target_names)
            return
        if any(v is value for v in self.stack) and not is_marker(value):
            if isinstance(target, ast.Name):  # still needed on the stack: a walrus or a chained assignment
                named = ast.NamedExpr(target=name(target.id, ast.Store()), value=self.expr(value))
                self.flush(target_names, side_effects=False)
                self.replace_everywhere(value, named)
                return
            # the stack keeps a copy (`x.a = y.b = v`): compute v once, into a temporary
            self.flush(set(), True)
            value = self.saved_name(value)
        if isinstance(value, ast.NamedExpr) and isinstance(target, ast.Name):
            self.emit(ast.Assign(targets=[value.target, target], value=value.value, lineno=0), writes=target_names | {value.target.id})
            return
        value = self.expr(value)
        # binding a plain local to an already-computed value cannot disturb pending calls
        self.emit(ast.Assign(targets=[target], value=value, lineno=0), writes=target_names,
                  side_effects=not (local and is_pure(value)))

    def store_unpacked(self, target: ast.expr, item: Unpacked) -> None:
        group = item.group
        if group.star_index == item.index:
            target = ast.Starred(value=target, ctx=ast.Store())
        group.targets[item.index] = target
        if any(t is None for t in group.targets):
            return
        tuple_target = ast.Tuple(elts=list(group.targets), ctx=ast.Store())
        if group.parent is not None:
            self.store(tuple_target, group.parent)
        else:
            self.store(tuple_target, group.source)

    # ---- dispatch --------------------------------------------------------------------------
    def run(self, instrs: list[Instr]) -> None:
        self.instrs, self.pc = instrs, 0
        while self.pc < len(instrs):
            ins = instrs[self.pc]
            handler = getattr(self, "op_" + ins.name, None)
            if handler is None:
                raise DecompileError(f"unsupported opcode {ins.original or ins.name} at offset {ins.offset}")
            handler(ins)
            if self.returned:
                return
            self.pc += 1

    # loads
    def op_LOAD_CONST(self, ins):
        self.push(const(ins.argval))

    def op_LOAD_SMALL_INT(self, ins):
        self.push(const(ins.argval))

    def op_LOAD_FAST(self, ins):
        if ins.argval == ".0":  # a comprehension's iterator argument
            self.push(Iter(name(".0")))
            return
        self.push(name(ins.argval))

    op_LOAD_NAME = op_LOAD_DEREF = op_LOAD_CLASSDEREF = op_LOAD_FAST

    def op_LOAD_FAST_AND_CLEAR(self, ins):
        self.frame.accumulator_pending = True
        self.push(SavedLocal(ins.argval))

    def op_LOAD_GLOBAL(self, ins):
        self.push(name(ins.argval))

    def op_PUSH_NULL(self, ins):
        self.push(NULL)

    op_PUSH_NULL_AFTER = op_PUSH_NULL

    def op_LOAD_ATTR(self, ins):
        self.push(ast.Attribute(value=self.expr(self.pop()), attr=ins.argval, ctx=ast.Load()))

    def op_LOAD_METHOD(self, ins):
        """Pushes [method, self] or [NULL, attribute]; CALL treats both alike, so model the second."""
        attribute = ast.Attribute(value=self.expr(self.pop()), attr=ins.argval, ctx=ast.Load())
        self.push(NULL)
        self.push(attribute)

    def op_LOAD_SUPER_ATTR(self, ins):
        """3.12+: `super().name` (or `super(cls, self).name`), possibly loaded as a method."""
        self_value, cls, super_fn = self.pop(), self.pop(), self.pop()
        # zero-argument form: cls and self come from the __class__ cell and the first argument
        args = [self.expr(cls), self.expr(self_value)] if ins.arg & 2 else []
        call = ast.Call(func=self.expr(super_fn), args=args, keywords=[])
        attribute = ast.Attribute(value=call, attr=ins.argval, ctx=ast.Load())
        if ins.arg & 1:
            self.push(NULL)
        self.push(attribute)

    def op_LOAD_ASSERTION_ERROR(self, ins):
        self.push(assertion_error_name())

    def op_LOAD_BUILD_CLASS(self, ins):
        raise DecompileError("class definitions are not supported")

    # stores
    def op_STORE_FAST(self, ins):
        if self.try_tuple_assignment():
            return
        self.store(name(ins.argval, ast.Store()), self.pop(), local=ins.name == "STORE_FAST")

    op_STORE_NAME = op_STORE_FAST

    def op_STORE_DEREF(self, ins):
        self.declare(ins)
        self.op_STORE_FAST(ins)

    def op_STORE_GLOBAL(self, ins):
        self.declare(ins)
        self.op_STORE_FAST(ins)

    def declare(self, ins) -> None:
        if ins.name == "STORE_GLOBAL":
            self.frame.globals_declared.add(ins.argval)
        elif ins.name == "STORE_DEREF" and ins.argval in self.frame.code.co_freevars:
            self.frame.nonlocals_declared.add(ins.argval)

    def op_STORE_ATTR(self, ins):
        obj = self.pop()
        value = self.pop()
        self.store(ast.Attribute(value=self.expr(obj), attr=ins.argval, ctx=ast.Store()), value)

    def op_STORE_SUBSCR(self, ins):
        key, container, value = self.pop(), self.pop(), self.pop()
        if isinstance(container, SymList) and not container.escaped and self.symlist_store(container, key, value):
            return
        self.store(ast.Subscript(value=self.expr(container), slice=self.expr(key), ctx=ast.Store()), value)

    def op_STORE_SLICE(self, ins):
        stop, start, container, value = self.pop(), self.pop(), self.pop(), self.pop()
        key = ast.Slice(lower=_none_to_absent(start), upper=_none_to_absent(stop))
        self.store(ast.Subscript(value=self.expr(container), slice=key, ctx=ast.Store()), value)

    def try_tuple_assignment(self) -> bool:
        """`a, b = b, a` arrives as consecutive stores of values already on the stack; when a later
        value reads a name an earlier store rebinds, assign them all at once as a tuple."""
        group = []
        for ins in self.instrs[self.pc:]:
            if ins.name not in SIMPLE_STORES or len(group) >= len(self.stack):
                break
            group.append(ins)
        if len(group) < 2:
            return False
        values = [self.stack[-1 - i] for i in range(len(group))]
        if not all(isinstance(v, ast.expr) and is_pure(v) for v in values):
            return False
        written: set[str] = set()
        conflict = False
        for ins, value in zip(group, values):
            conflict = conflict or bool(names_read(value) & written)
            written.add(ins.argval)
        if not conflict:
            return False
        for ins in group:
            self.declare(ins)
        self.popn(len(group))
        targets = ast.Tuple(elts=[name(i.argval, ast.Store()) for i in group], ctx=ast.Store())
        self.emit(ast.Assign(targets=[targets], value=ast.Tuple(elts=values, ctx=ast.Load()), lineno=0),
                  writes=written)
        self.pc += len(group) - 1
        return True

    def op_DELETE_FAST(self, ins):
        # only expressions reading this local can notice when it goes away
        self.emit(ast.Delete(targets=[name(ins.argval, ast.Del())]), writes={ins.argval}, side_effects=False)

    def op_DELETE_DEREF(self, ins):
        self.emit(ast.Delete(targets=[name(ins.argval, ast.Del())]), writes={ins.argval})

    op_DELETE_NAME = op_DELETE_DEREF

    def op_DELETE_GLOBAL(self, ins):
        self.frame.globals_declared.add(ins.argval)
        self.op_DELETE_FAST(ins)

    def op_DELETE_ATTR(self, ins):
        obj = self.pop()
        self.emit(ast.Delete(targets=[ast.Attribute(value=self.expr(obj), attr=ins.argval, ctx=ast.Del())]))

    def op_DELETE_SUBSCR(self, ins):
        key, container = self.pop(), self.pop()
        if isinstance(container, SymList) and not container.escaped and self.symlist_delete(container, key):
            return
        self.emit(ast.Delete(targets=[ast.Subscript(value=self.expr(container), slice=self.expr(key), ctx=ast.Del())]))

    # stack shuffles
    def op_POP_TOP(self, ins):
        value = self.pop()
        if isinstance(value, (ast.Constant, ast.Name)) or is_marker(value):
            return
        self.emit(ast.Expr(value=self.expr(value)))

    def op_COPY(self, ins):
        self.push(self.stack[-ins.arg])

    def op_SWAP(self, ins):
        self.stack[-1], self.stack[-ins.arg] = self.stack[-ins.arg], self.stack[-1]

    # operators
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

    def op_BINARY_SLICE(self, ins):
        stop, start, container = self.pop(), self.pop(), self.pop()
        key = ast.Slice(lower=_none_to_absent(start), upper=_none_to_absent(stop))
        self.push(ast.Subscript(value=self.expr(container), slice=key, ctx=ast.Load()))

    def op_BUILD_SLICE(self, ins):
        parts = [_none_to_absent(self.expr(v)) for v in self.popn(ins.arg)]
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
            self.push(_as_tuple(self.expr(value)))
        elif "PRINT" in kind:
            self.push(value)
        else:
            raise DecompileError(f"unsupported intrinsic {kind}")

    # containers
    def op_BUILD_TUPLE(self, ins):
        self.push(ast.Tuple(elts=[self.expr(v) for v in self.popn(ins.arg)], ctx=ast.Load()))

    def start_accumulator(self, ins, kind: str) -> bool:
        if ins.arg or not self.frame.accumulator_pending:
            return False
        self.frame.accumulator_pending = False
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
        self.push(ast.Dict(keys=flat[0::2], values=flat[1::2]))

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
        self.push(_as_tuple(self.expr(self.pop())))

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
        if not isinstance(self.stack[-ins.arg], Accumulator):
            raise DecompileError("SET_ADD outside a comprehension")
        self.out.append(ast.Expr(value=ast.Call(func=name("__append__"), args=[self.expr(value)], keywords=[])))

    def op_MAP_ADD(self, ins):
        value, key = self.pop(), self.pop()
        if not isinstance(self.stack[-ins.arg], Accumulator):
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

    # f-strings
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

    # calls
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
                func, args = second, [first] + args
        if isinstance(func, WithExit):
            self.push(WithExitDone())
            return
        positional = args[: len(args) - len(kwnames)]
        keywords = [ast.keyword(arg=k, value=self.expr(v)) for k, v in zip(kwnames, args[len(positional):])]
        if isinstance(func, FunctionValue) and positional and isinstance(positional[0], Iter) and _is_comprehension(func):
            self.push(self.frame.render_function(func, positional[0]))
            return
        self.push(ast.Call(func=self.expr(func), args=[self.expr(a) for a in positional], keywords=keywords))

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
            for k, v in zip(kwargs.keys, kwargs.values):
                if k is None:
                    result.append(ast.keyword(arg=None, value=v))
                elif isinstance(k, ast.Constant) and isinstance(k.value, str) and k.value.isidentifier():
                    result.append(ast.keyword(arg=k.value, value=v))
                else:
                    return [ast.keyword(arg=None, value=kwargs)]
            return result
        return [ast.keyword(arg=None, value=kwargs)]

    # functions
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
        return {k.value: v for k, v in zip(value.keys, value.values)}

    def op_RETURN_GENERATOR(self, ins):
        self.push(NULL)  # what the first resumption receives; popped right away

    # match statements, written as the plain tests the MATCH_* opcodes perform
    def op_MATCH_SEQUENCE(self, ins):
        subject = self.expr(self.stack[-1])
        abc = _abc_attribute("Sequence")
        text_types = ast.Tuple(elts=[name("str"), name("bytes"), name("bytearray")], ctx=ast.Load())
        self.push(ast.BoolOp(op=ast.And(), values=[
            _call("isinstance", subject, abc),
            ast.UnaryOp(op=ast.Not(), operand=_call("isinstance", subject, text_types))]))

    def op_MATCH_MAPPING(self, ins):
        self.push(_call("isinstance", self.expr(self.stack[-1]), _abc_attribute("Mapping")))

    def op_GET_LEN(self, ins):
        self.push(_call("len", self.expr(self.stack[-1])))

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
        names, cls, subject = self.expr(self.pop()), self.expr(self.pop()), self.expr(self.pop())
        if ins.arg:
            raise DecompileError("positional class patterns in match statements are not supported")
        attributes = list(names.value) if isinstance(names, ast.Constant) else None
        if attributes is None:
            raise DecompileError("match class pattern with computed attribute names")
        tests = [_call("isinstance", subject, cls)] + [_call("hasattr", subject, const(a)) for a in attributes]
        values = ast.Tuple(elts=[ast.Attribute(value=subject, attr=a, ctx=ast.Load()) for a in attributes],
                           ctx=ast.Load())
        test = tests[0] if len(tests) == 1 else ast.BoolOp(op=ast.And(), values=tests)
        self.push_match_result(ast.IfExp(test=test, body=values, orelse=const(None)))

    # imports
    def op_IMPORT_NAME(self, ins):
        fromlist, level = self.expr(self.pop()), self.expr(self.pop())
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

    def op_YIELD_VALUE(self, ins):
        self.push(ast.Yield(value=self.expr(self.pop())))

    def op_BEFORE_WITH(self, ins):
        manager = self.expr(self.pop())
        self.push(WithExit(manager))
        self.push(WithEnter())

    def op_POP_EXCEPT(self, ins):
        """Drops the saved exception (one value; three in 3.10), wherever a return value left it."""
        for _ in range(FEATURES["exception_values"]):
            index = next((i for i in range(len(self.stack) - 1, -1, -1) if isinstance(self.stack[i], ExcInfo)), None)
            if index is None:
                raise DecompileError("POP_EXCEPT without an active handler")
            del self.stack[index]
        self.left_handler = True

    def op_RERAISE(self, ins):
        self.emit(ast.Raise(exc=None, cause=None), side_effects=False)
        self.returned = True

    # iteration
    def op_GET_ITER(self, ins):
        self.push(Iter(self.expr(self.pop())))

    def op_RETURN_VALUE(self, ins):
        value = self.pop()
        self.emit(ast.Return(value=self.expr(value)), side_effects=False)
        self.returned = True

    def op_RAISE_VARARGS(self, ins):
        args = [self.expr(v) for v in self.popn(ins.arg)]
        if ins.arg == 0:
            stmt = ast.Raise(exc=None, cause=None)
        else:
            stmt = ast.Raise(exc=args[0], cause=args[1] if ins.arg == 2 else None)
        self.emit(stmt, side_effects=False)
        self.returned = True

    # Dynamo's symbolic lists
    def symlist_get(self, lst: SymList, key):
        if isinstance(key, ast.Constant) and isinstance(key.value, int):
            if -len(lst.items) <= key.value < len(lst.items):
                return lst.items[key.value]
            return None
        if isinstance(key, ast.Slice):
            bounds = _const_slice(key, len(lst.items))
            if bounds is not None:
                return SymList(lst.items[bounds[0]:bounds[1]])
        return None

    def symlist_store(self, lst: SymList, key, value) -> bool:
        if isinstance(key, ast.Slice) and isinstance(value, SymList) and not value.escaped:
            bounds = _const_slice(key, len(lst.items))
            if bounds is None:
                return False
            lst.items[bounds[0]:bounds[1]] = list(value.items)
            return True
        if isinstance(key, ast.Constant) and isinstance(key.value, int) and -len(lst.items) <= key.value < len(lst.items):
            lst.items[key.value] = value
            return True
        return False

    def symlist_delete(self, lst: SymList, key) -> bool:
        if isinstance(key, ast.Constant) and isinstance(key.value, int) and -len(lst.items) <= key.value < len(lst.items):
            del lst.items[key.value]
            return True
        return False


def _call(function: str, *args) -> ast.Call:
    return ast.Call(func=name(function), args=list(args), keywords=[])


def _abc_attribute(attr: str) -> ast.expr:
    module = _call("__import__", const("collections.abc"))
    return ast.Attribute(value=ast.Attribute(value=module, attr="abc", ctx=ast.Load()), attr=attr, ctx=ast.Load())


def _const_slice(key: ast.Slice, length: int):
    parts = []
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


def _none_to_absent(node):
    if isinstance(node, ast.Constant) and node.value is None:
        return None
    return node


def _as_tuple(node: ast.expr) -> ast.expr:
    if isinstance(node, ast.List):
        return ast.Tuple(elts=node.elts, ctx=ast.Load())
    return ast.Call(func=name("tuple"), args=[node], keywords=[])


def _same_target(a: ast.expr, b: ast.expr) -> bool:
    if isinstance(a, ast.Name) and isinstance(b, ast.Name):
        return a.id == b.id
    if isinstance(a, ast.Attribute) and isinstance(b, ast.Attribute):
        return a.attr == b.attr and a.value is b.value
    if isinstance(a, ast.Subscript) and isinstance(b, ast.Subscript):
        return a.value is b.value and a.slice is b.slice
    return False


def _is_comprehension(fn: FunctionValue) -> bool:
    return fn.code.co_name in ("<listcomp>", "<setcomp>", "<dictcomp>", "<genexpr>")
