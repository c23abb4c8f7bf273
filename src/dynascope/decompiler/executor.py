"""Symbolic execution of straight-line canonical instructions into Python AST.

The operand stack holds `ast.expr` nodes (and the markers of `values.py`).  An expression is left on
the stack, unevaluated, only while deferring it cannot change what it computes: before a statement
is emitted, anything the statement could disturb is first saved to a temporary.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Set
from typing import Any, cast

from dynascope.decompiler.comprehension import from_statements
from dynascope.decompiler.machine import Frame
from dynascope.decompiler.nodes import (
    BINOPS,
    INPLACE_FUNCTIONS,
    NO_ARGUMENTS,
    as_value,
    assertion_error_name,
    call_named,
    const,
    constant_expr,
    is_pure,
    name,
    names_read,
    same_target,
)
from dynascope.decompiler.opcodes import FEATURES, Instr
from dynascope.decompiler.ops_calls import CallOps
from dynascope.decompiler.ops_containers import ContainerOps
from dynascope.decompiler.ops_expressions import ExpressionOps
from dynascope.decompiler.ops_match import PatternOps
from dynascope.decompiler.values import (
    NULL,
    Accumulator,
    BuildClass,
    CellRef,
    ClassValue,
    DecompileError,
    Delegate,
    ExcInfo,
    FunctionValue,
    ImportedModule,
    ImportedName,
    Inplace,
    Iter,
    LoopValue,
    SavedLocal,
    SymList,
    Unpacked,
    WithEnter,
    WithExit,
    WithExitDone,
    is_marker,
)

DISCARDED = ast.Name(id="_", ctx=ast.Store())  # an unpacked item nothing stores
SIMPLE_STORES = ("STORE_FAST", "STORE_DEREF", "STORE_GLOBAL", "STORE_NAME")
EVALUATED_AT = "_dynascope_position"


def _evaluated_at(value: Any) -> int:
    if isinstance(value, SymList):  # a list Dynamo built: where its first item was computed
        return min((_evaluated_at(item) for item in value.items if not is_pure(item)), default=0)
    return getattr(value, EVALUATED_AT, 0)


class BlockExecutor(ExpressionOps, CallOps, ContainerOps, PatternOps):
    """Runs canonical instructions on a symbolic stack, appending statements to `out`.
    Opcodes are `op_<NAME>` methods; all but loads, stores and control flow live in the ops_*
    mixins."""

    def __init__(self, frame: Frame, stack: list, out: list):
        self.frame = frame
        self.stack = stack
        self.out = out
        self.kwnames: tuple = ()
        self.loop_target: Any = None  # set when the loop value gets stored
        self.returned = False
        self.left_handler = False
        self.saved_as: dict[int, tuple] = {}

    def push(self, value: Any) -> None:
        if isinstance(value, ast.AST) and not hasattr(value, EVALUATED_AT):
            setattr(value, EVALUATED_AT, self.frame.next_position())
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
            return cast(ast.expr, value)  # the AST nodes on the stack are expressions
        if isinstance(value, SymList):
            value.escaped = True
            return ast.List(elts=[self.expr(i) for i in value.items], ctx=ast.Load())
        if isinstance(value, (FunctionValue, ClassValue)):
            return self.function_expr(value)
        if isinstance(value, Inplace):
            return self.inplace_call(value)
        if isinstance(value, Iter):
            return ast.Call(func=name("iter"), args=[value.iterable], keywords=[])
        if isinstance(value, CellRef):  # the very cell: a lambda reading the variable closes over it
            cells = ast.Attribute(value=ast.Lambda(args=NO_ARGUMENTS, body=name(value.name)), attr="__closure__",
                                  ctx=ast.Load())
            return ast.Subscript(value=cells, slice=const(0), ctx=ast.Load())
        if isinstance(value, Accumulator):
            return self.comprehension_of(value)
        if isinstance(value, ImportedModule):
            return call_named("__import__", const(value.name), call_named("globals"), const(None),
                              const(value.fromlist), const(value.level))
        if isinstance(value, ImportedName):
            return ast.Attribute(value=self.expr(value.module), attr=value.name, ctx=ast.Load())
        if isinstance(value, Unpacked):
            return self.unpack_into_temporaries(value)
        raise DecompileError(f"{type(value).__name__} used as a value")

    def unpack_into_temporaries(self, item: Unpacked) -> ast.expr:
        """An unpacked item used as a value (match sub-patterns; Dynamo 2.5.1 branching on the graph's
        last output after storing the others): the items not stored yet go into temporaries."""
        group = item.group
        if group.parent is not None or group.targets[item.index] is not None:
            raise DecompileError("unpacked item used as a value after part of it was stored")
        if group.stored_at is not None and group.stored_at != (id(self.out), len(self.out)):
            raise DecompileError("unpacked item used as a value after statements that follow the unpacking")
        temps = {i: self.frame.new_temp() for i, t in enumerate(group.targets) if t is None}
        if any(isinstance(v, Unpacked) and v.group is group and v.index not in temps for v in self.stack):
            raise DecompileError("unpacked item both stored and still on the stack")
        for i, temp in temps.items():
            self.store_unpacked(name(temp, ast.Store()), Unpacked(group, i))
        for i, value in enumerate(self.stack):
            if isinstance(value, Unpacked) and value.group is group:
                self.stack[i] = name(temps[value.index])
        return name(temps[item.index])

    def comprehension_of(self, acc: Accumulator) -> ast.expr:
        stmts = acc.out[acc.start:]
        del acc.out[acc.start:]
        return from_statements(stmts, acc.kind)

    def inplace_call(self, value: Inplace) -> ast.expr:
        func = ast.Attribute(value=ast.Call(func=name("__import__"), args=[const("operator")], keywords=[]),
                             attr=INPLACE_FUNCTIONS[value.op], ctx=ast.Load())
        return ast.Call(func=func, args=[value.target, value.value], keywords=[])

    def function_expr(self, fn: FunctionValue | ClassValue) -> ast.expr:
        """A def (or class) used as a value: the statement, then its name."""
        if isinstance(fn, ClassValue):
            self.emit(self.frame.render_function(fn, fn.name), writes={fn.name})
            return name(fn.name)
        if fn.code.co_name == "<lambda>":
            return self.frame.render_function(fn, "<lambda>")
        temp = fn.code.co_name if fn.code.co_name.isidentifier() else self.frame.new_temp()
        self.emit(self.frame.render_function(fn, temp), writes={temp})
        return name(temp)

    def emit(self, stmt: ast.stmt, writes: Set[str] = frozenset(), side_effects: bool = True) -> None:
        if side_effects and isinstance(stmt, (ast.Assign, ast.Expr)) and self.computed_before_stack(stmt.value):
            self.push(stmt.value)  # computed before values still on the stack: save it in its turn
            self.flush(writes, side_effects)
            stmt.value = self.pop()
        self.flush(writes, side_effects)
        self.out.append(stmt)

    def computed_before_stack(self, value: Any) -> bool:
        if is_pure(value) or not hasattr(value, EVALUATED_AT):
            return False
        items = [i for v in self.stack for i in (v.items if isinstance(v, SymList) else [v])]
        return any(not is_pure(v) and _evaluated_at(v) > _evaluated_at(value) for v in items)

    def flush(self, writes: Set[str] = frozenset(), side_effects: bool = True) -> None:
        """Save stack values the next statement could disturb into temporaries, in stack order.
        Values below a comprehension being rebuilt stay: the comprehension's loop statements
        become one expression evaluated after them, as in the original."""
        first = 0
        for i, value in enumerate(self.stack):
            if isinstance(value, Accumulator):
                first = i + 1
        # saved in the order they were computed: SWAP/ROT may have reordered the stack
        slots: list[tuple[int, int, int | None]] = []
        for i in range(first, len(self.stack)):
            value = self.stack[i]
            if isinstance(value, SymList):
                slots += [(_evaluated_at(item), i, j) for j, item in enumerate(value.items)]
            else:
                slots.append((_evaluated_at(value), i, None))
        for _, i, j in sorted(slots, key=lambda slot: slot[0]):
            if j is None:
                self.stack[i] = self.saved(self.stack[i], writes, side_effects)
            elif j < len(self.stack[i].items):
                self.stack[i].items[j] = self.saved(self.stack[i].items[j], writes, side_effects)

    def saved(self, value: Any, writes, side_effects: bool) -> Any:
        if isinstance(value, SymList):
            value.items = [self.saved(v, writes, side_effects) for v in value.items]
            return value
        if isinstance(value, Iter):
            return value
        if isinstance(value, ast.Starred):  # `*v` inside a list: only v can be saved
            return ast.Starred(value=self.saved(value.value, writes, side_effects), ctx=ast.Load())
        if is_marker(value):
            return value
        if is_pure(value) and not (names_read(value) & set(writes)):
            return value
        if not side_effects and not (names_read(value) & set(writes)):
            return value
        temp = self.frame.new_temp()
        # (a value saved before may be part of this one, as f() is of `a < f()` in `a < f() < b`)
        computed = as_value(self.use_saved(self.expr(value)))
        self.out.append(ast.Assign(targets=[name(temp, ast.Store())], value=computed, lineno=0))
        self.replace_everywhere(value, name(temp))
        self.saved_as[id(value)] = (value, temp)
        return name(temp)

    def saved_name(self, value: Any) -> Any:
        """The temporary `value` was saved to by the last flush (or `value` itself)."""
        saved = self.saved_as.get(id(value))
        return name(saved[1]) if saved is not None and saved[0] is value else value

    def use_saved(self, node: Any) -> Any:
        """`node` with any sub-expression that was saved to a temporary replaced by it.  A new node
        where something changed: the stacks of other arms (and abandoned attempts) share `node`."""
        saved = self.saved_as.get(id(node))
        if saved is not None and saved[0] is node:
            return name(saved[1])
        if not isinstance(node, ast.AST) or not self.saved_as:
            return node
        changes = {}
        for field, value in ast.iter_fields(node):
            new = [self.use_saved(v) for v in value] if isinstance(value, list) else self.use_saved(value)
            if (any(a is not b for a, b in zip(new, value, strict=False)) if isinstance(value, list)
                    else new is not value):
                changes[field] = new
        if not changes:
            return node
        result = copy.copy(node)
        for field, new in changes.items():
            setattr(result, field, new)
        return result

    def replace_everywhere(self, old: Any, new: Any) -> None:
        if hasattr(old, EVALUATED_AT) and isinstance(new, ast.AST):
            setattr(new, EVALUATED_AT, getattr(old, EVALUATED_AT))
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
        if (isinstance(value, Inplace) and isinstance(target, (ast.Name, ast.Attribute, ast.Subscript))
                and same_target(value.target, target)):
            self.emit(ast.AugAssign(target=target, op=BINOPS[value.op[:-1]](), value=value.value),
                      writes=target_names)
            return
        if isinstance(value, FunctionValue) and isinstance(target, ast.Name) and value.code.co_name == target.id:
            self.emit(self.frame.render_function(value, target.id), writes=target_names)
            return
        if isinstance(value, ClassValue) and isinstance(target, ast.Name) and value.name == target.id:
            self.emit(self.frame.render_function(value, target.id), writes=target_names)
            return
        if isinstance(value, SymList) and any(v is value for v in self.stack):
            value = self.materialize(value)  # `a = b = []`: one list, bound twice
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
            self.emit(ast.Assign(targets=[value.target, target], value=value.value, lineno=0),
                      writes=target_names | {value.target.id})
            return
        value = self.expr(value)
        # binding a plain local to an already-computed value cannot disturb pending calls
        self.emit(ast.Assign(targets=[target], value=value, lineno=0), writes=target_names,
                  side_effects=not (local and is_pure(value)))

    def materialize(self, lst: SymList) -> ast.expr:
        """A list the stack still refers to, built once into a temporary that both uses share."""
        self.flush(set(), True)
        temp = self.frame.new_temp()
        self.out.append(ast.Assign(targets=[name(temp, ast.Store())], value=self.expr(lst), lineno=0))
        self.replace_everywhere(lst, name(temp))
        return name(temp)

    def store_unpacked(self, target: ast.expr, item: Unpacked) -> None:
        group = item.group
        if group.star_index == item.index:
            target = ast.Starred(value=target, ctx=ast.Store())
        if group.stored_at is None:
            group.stored_at = (id(self.out), len(self.out))
        group.targets[item.index] = target
        if any(t is None for t in group.targets):
            return
        tuple_target = ast.Tuple(elts=self.discard_targets(group.targets), ctx=ast.Store())
        if group.parent is not None:
            self.store(tuple_target, group.parent)
        else:
            self.store(tuple_target, group.source)

    def discard_targets(self, targets: list) -> list:
        """Targets for items popped unstored (3.13 turns `_, _, x = t`'s first store into POP_TOP):
        the next plain name the unpacking assigns anyway, else a temporary."""
        result = list(targets)
        plain = [t.value if isinstance(t, ast.Starred) else t for t in result]
        for i, target in enumerate(plain):
            if target is not DISCARDED:
                continue
            following = next((t for t in plain[i + 1:] if t is not DISCARDED), None)
            replacement = following.id if isinstance(following, ast.Name) else self.frame.new_temp()
            replaced = name(replacement, ast.Store())
            result[i] = ast.Starred(value=replaced, ctx=ast.Store()) if isinstance(result[i], ast.Starred) else replaced
        return result

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

    def op_LOAD_CONST(self, ins):
        self.push(constant_expr(ins.argval))

    def op_LOAD_CLOSURE(self, ins):
        self.push(CellRef(ins.argval))

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
        self.push(BuildClass())

    def op_LOAD_LOCALS(self, ins):  # 3.12+ class bodies: the namespace LOAD_FROM_DICT_OR_* reads first
        self.push(BuildClass())

    def op_LOAD_FROM_DICT_OR_DEREF(self, ins):
        if not isinstance(self.pop(), BuildClass):
            raise DecompileError("LOAD_FROM_DICT_OR_DEREF without LOAD_LOCALS")
        self.push(name(ins.argval))

    op_LOAD_FROM_DICT_OR_GLOBALS = op_LOAD_FROM_DICT_OR_DEREF

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

    def try_tuple_assignment(self) -> bool:
        """`a, b = b, a` arrives as consecutive stores of values already on the stack; when a later
        value reads a name an earlier store rebinds, assign them all at once as a tuple."""
        group: list[Instr] = []
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
        for ins, value in zip(group, values, strict=False):
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

    def op_POP_TOP(self, ins):
        value = self.pop()
        if isinstance(value, Unpacked):
            self.store_unpacked(DISCARDED, value)
            return
        if isinstance(value, (ast.Constant, ast.Name)) or is_marker(value) or id(value) in self.frame.already_evaluated:
            return
        if getattr(value, "evaluated_by_test", False):  # the copy a branch already tested
            return
        self.emit(ast.Expr(value=self.expr(value)))

    def op_COPY(self, ins):
        self.push(self.stack[-ins.arg])

    def op_SWAP(self, ins):
        self.stack[-1], self.stack[-ins.arg] = self.stack[-ins.arg], self.stack[-1]

    def op_RETURN_GENERATOR(self, ins):
        self.push(NULL)  # what the first resumption receives; popped right away

    def op_YIELD_VALUE(self, ins):
        self.push(ast.Yield(value=self.expr(self.pop())))

    def op_GET_YIELD_FROM_ITER(self, ins):
        self.push(Delegate(self.expr(self.pop()), "yield from"))

    def op_GET_AWAITABLE(self, ins):
        value = self.pop()
        if isinstance(value, (WithEnter, WithExitDone)) or getattr(value, "awaited_by_syntax", False):
            self.push(Delegate(value, "implied"))  # `async with`'s __aenter__/__aexit__, an async comprehension
            return
        self.push(Delegate(self.expr(value), "await"))

    def op_YIELD_FROM(self, ins):
        sent, delegate = self.pop(), self.pop()
        if not (isinstance(sent, ast.Constant) and sent.value is None and isinstance(delegate, Delegate)):
            raise DecompileError("YIELD_FROM without GET_YIELD_FROM_ITER/GET_AWAITABLE")
        if delegate.kind == "implied":
            self.push(delegate.value)
            return
        node = ast.YieldFrom if delegate.kind == "yield from" else ast.Await
        self.push(node(value=delegate.value))

    def op_GET_AITER(self, ins):
        self.push(Iter(self.expr(self.pop())))

    def op_ASYNC_GEN_WRAP(self, ins):
        pass  # an async generator's yielded value, wrapped for the event loop

    def op_BEFORE_WITH(self, ins):
        manager = self.expr(self.pop())
        self.push(WithExit(manager, is_async=ins.argval == "async"))
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
        stmt = ast.Raise(exc=None, cause=None)
        stmt.reraise = True  # type: ignore[attr-defined]  # the compiler's re-raise, not a `raise` the user wrote
        self.emit(stmt, side_effects=False)
        self.returned = True

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
