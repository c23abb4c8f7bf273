"""Is a code object compiled from decompiled source equivalent to the code Dynamo generated?

Stepping mode (stepping.py) installs recompiled decompiled source in place of Dynamo's bytecode only
when this says yes. Byte-for-byte comparison cannot work: Dynamo shuffles values on the stack (COPY,
SWAP, temporary lists it slices and fills) where the decompiler writes plain expressions. So both
code objects are run symbolically, every path, and must do the same observable things in the same
order: each operation that can run code of the program (a call, an attribute read, a subscript of an
object we do not know, a truth test, a comparison, a global read, a store to an attribute, a cell, a
global...) is an event, with its operands written out in full; what is left on the stack, in local
variables or in lists built inside the frame is only data that flows into those events. Two code objects
are equivalent when, for every way the truth tests can go, they produce the same events with the same
operands and end the same way (return the same value, or raise).

Judged pure, and so free to move between events: constants, reads and writes of the frame's own local
variables, building tuples and slices, building lists and dicts and indexing, slicing and filling them
with constant indices (they are real lists made in this frame), reads of the globals Dynamo installs
for itself (`__compiled_fn_*`, `__resume_at_*`, `__import_*`, `__builtins_dict_*`, never rebound while a
frame runs), and indexing the result of a compiled graph with a constant (Dynamo's graphs return a
tuple or list). Anything the model does not know (loops, `with` statements, generators, an
opcode not listed here) makes the answer "not checked", never "equal". Inside a `try` (the exception
table), every event may raise: both ways are followed, the handler's with the exception of that event.

Imports nothing from torch. The opcode handling covers CPython 3.11, 3.12 and 3.13; VERIFIED says on
which of them it was checked against real Dynamo output (stepping installs nothing on the others).
"""

from __future__ import annotations

import ast
import copy
import dis
import itertools
import sys
from dataclasses import dataclass, field
from types import CodeType
from typing import Any

VERSION = sys.version_info[:2]
VERIFIED = {(3, 11), (3, 12), (3, 13)}  # run against Dynamo: 3.11 (torch 2.5.1 .. 2.15), 3.12, 3.13 (2.15)
MAX_STEPS = 50_000  # instructions over all paths
DYNAMO_GLOBALS = ("__compiled_fn_", "__resume_at_", "__import_", "__builtins_dict_")
NULL = ("null",)
_COMPOSITE = ("item", "slice", "is", "star", "not", "truth", "function", "exc")  # pure values made of other values


class NotChecked(Exception):
    """The model cannot follow this code: equivalence is not established."""


@dataclass
class ListObj:
    """A list (or dict, as key/value pairs) built inside the frame: its contents are known."""

    uid: int
    items: list[Any]
    kind: str = "list"
    escaped: bool = False  # handed to an event: who knows what changed it since, or holds it now


@dataclass
class Event:
    """The result of an event: opaque, except that graph outputs may be indexed purely."""

    index: int
    graph_output: bool = False


@dataclass
class State:
    pc: int
    stack: list[Any]
    env: dict[str, Any]
    events: list[tuple]
    names: dict[int, int] = field(default_factory=dict)  # ListObj uid -> canonical number
    kw_names: tuple | None = None


def check(dynamo: CodeType, ours: CodeType) -> str | None:
    """None when `ours` behaves like `dynamo` (see the module doc), else why it does not or could not be
    checked. Also requires the same signature, flags, free and cell variables."""
    if VERSION not in VERIFIED:
        return f"the equivalence check was not verified on Python {VERSION[0]}.{VERSION[1]}"
    for attr in ("co_argcount", "co_posonlyargcount", "co_kwonlyargcount", "co_freevars", "co_cellvars"):
        if getattr(dynamo, attr) != getattr(ours, attr):
            return f"{attr} differs: {getattr(dynamo, attr)!r} vs {getattr(ours, attr)!r}"
    nargs = _total_args(dynamo)
    if dynamo.co_varnames[:nargs] != ours.co_varnames[:nargs]:
        return "argument names differ"
    flags = 0x1 | 0x2 | 0x4 | 0x8 | 0x20 | 0x80 | 0x100 | 0x200  # optimized, newlocals, varargs, varkw, generator...
    if dynamo.co_flags & flags != ours.co_flags & flags:
        return f"code flags differ: {dynamo.co_flags:#x} vs {ours.co_flags:#x}"
    try:
        a, b = trace(dynamo), trace(ours)
    except NotChecked as exc:
        return f"not checked: {exc}"
    except RecursionError:
        return "not checked: too deeply nested"
    except Exception as exc:  # noqa: BLE001 - code the model gets wrong (an index out of range) is not equal
        return f"not checked: {type(exc).__name__}: {exc}"
    if a != b:
        return "the decompiled code does not do the same things in the same order" + _first_difference(a, b)
    return None


def _total_args(code: CodeType) -> int:
    return code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 0x4) + bool(code.co_flags & 0x8)


def _first_difference(a: Any, b: Any) -> str:
    for x, y in itertools.zip_longest(_flat(a), _flat(b)):
        if x != y:
            return f": Dynamo's {x!r:.200} vs decompiled {y!r:.200}"
    return ""


def _flat(tree: Any) -> list:
    if tree and tree[0] == "branch":
        return [("branch on", tree[1]), ("if true",), *_flat(tree[2]), ("if false",), *_flat(tree[3])]
    return list(tree)


# --------------------------------------------------------------------------------------------------
# The symbolic machine
# --------------------------------------------------------------------------------------------------


def trace(code: CodeType) -> tuple:
    """Every path of `code` as a tree: a tuple of events ending in ("return", value), ("raise", ...) or
    ("branch", condition, tree if true, tree if false)."""
    if code.co_flags & (0x20 | 0x80 | 0x100 | 0x200):
        raise NotChecked("generators and coroutines")
    instrs = [i for i in dis.get_instructions(code) if i.opname not in ("CACHE", "EXTENDED_ARG")]
    machine = _Machine(code, instrs, _handlers(code))
    env: dict[str, Any] = {name: ("arg", name) for name in code.co_varnames[:_total_args(code)]}
    return machine.run(State(pc=0, stack=[], env=env, events=[]))


def _handlers(code: CodeType) -> list[tuple[int, int, int, int, bool]]:
    """The exception table: (start, end, handler, stack depth, push lasti), innermost first."""
    if not getattr(code, "co_exceptiontable", b""):
        return []
    parse = getattr(dis, "_parse_exception_table", None)  # CPython 3.11 .. 3.13
    if parse is None:
        raise NotChecked("exception handlers (no reader for this Python's exception table)")
    return [(e.start, e.end, e.target, e.depth, bool(e.lasti)) for e in parse(code)]


class _Machine:
    def __init__(self, code: CodeType, instrs: list[dis.Instruction], handlers: list[tuple[int, int, int, int, bool]]):
        self.code = code
        self.instrs = instrs
        self.handlers = handlers
        self.at = {ins.offset: n for n, ins in enumerate(instrs)}
        self.steps = 0
        self.uids = itertools.count()

    # ---- values ----------------------------------------------------------------------------------

    def render(self, value: Any, st: State, escape: bool = False) -> Any:
        """A value written out in full, the same way for both code objects. `escape`: it goes to an
        event, which may keep or change the lists in it (and a graph's output): from then on they are
        opaque, shown by identity only."""
        if isinstance(value, ListObj):
            number = st.names.setdefault(value.uid, len(st.names))
            if value.escaped:
                return (value.kind, number, "escaped")
            shown = (value.kind, number, tuple(self.render(v, st, escape) for v in value.items))
            value.escaped = escape
            return shown
        if isinstance(value, Event):
            if escape:
                value.graph_output = False
            return ("event", value.index)
        if isinstance(value, tuple) and value and value[0] == "tuple":
            return ("tuple", *(self.render(v, st, escape) for v in value[1:]))
        if isinstance(value, tuple) and value and value[0] in _COMPOSITE:
            return (value[0], *(self.render(v, st, escape) for v in value[1:]))
        return value

    def event(self, st: State, *what: Any, graph_output: bool = False) -> Event:
        st.events.append(tuple(self.render(w, st, escape=True) for w in what))
        return Event(len(st.events) - 1, graph_output)

    @staticmethod
    def const(value: Any) -> Any:
        if isinstance(value, CodeType):
            raise NotChecked("nested code objects")
        if isinstance(value, (tuple, frozenset)):
            return ("const", type(value).__name__, tuple(_Machine.const(v) for v in value))
        return ("const", type(value).__name__, repr(value))

    @staticmethod
    def concrete(value: Any) -> Any:
        """The Python value of a constant int/None/slice-of-constants, else raise NotChecked."""
        if isinstance(value, tuple) and value[:1] == ("const",) and value[1] in ("int", "NoneType", "bool"):
            return ast.literal_eval(value[2])
        if isinstance(value, tuple) and value[:1] == ("slice",):
            return slice(*(_Machine.concrete(v) for v in value[1:]))
        raise NotChecked("an index that is not a constant")

    def contents(self, value: Any) -> list | None:
        if isinstance(value, ListObj) and value.kind == "list" and not value.escaped:
            return list(value.items)
        if isinstance(value, tuple) and value[:1] == ("tuple",):
            return list(value[1:])
        if isinstance(value, tuple) and value[:1] == ("const",) and value[1] == "tuple":
            return list(value[2])
        return None

    def new_list(self, items: list[Any], kind: str = "list") -> ListObj:
        return ListObj(next(self.uids), items, kind)

    # ---- running ---------------------------------------------------------------------------------

    def run(self, st: State) -> tuple:
        while True:
            self.steps += 1
            if self.steps > MAX_STEPS:
                raise NotChecked("too many paths")
            if st.pc >= len(self.instrs):
                raise NotChecked("ran off the end of the code")
            ins = self.instrs[st.pc]
            st.pc += 1
            before = len(st.events)
            result = self.step(ins, st)
            if result is not None:
                return result
            handler = self.handler_for(ins) if len(st.events) > before else None
            if handler is not None:  # the event may raise: the handler runs instead of what follows
                if len(st.events) - before > 1:
                    raise NotChecked("an instruction with two events inside a try block")
                return self.may_raise(st, handler, ("exc", len(st.events) - 1))

    def handler_for(self, ins: dis.Instruction) -> tuple[int, int, int, int, bool] | None:
        return next((h for h in self.handlers if h[0] <= ins.offset < h[1]), None)

    def go_to_handler(self, st: State, handler: tuple[int, int, int, int, bool], exc: Any) -> None:
        _, _, target, depth, lasti = handler
        if target not in self.at or depth > len(st.stack):
            raise NotChecked("an exception handler the model cannot follow")
        del st.stack[depth:]
        if lasti:
            st.stack.append(("lasti",))
        st.stack.append(exc)
        st.pc = self.at[target]

    def may_raise(self, st: State, handler: tuple[int, int, int, int, bool], exc: Any) -> tuple:
        raised = copy.deepcopy(st)
        self.go_to_handler(raised, handler, exc)
        return ("branch", ("raises", exc), self.run(raised), self.run(st))

    def jump_to(self, ins: dis.Instruction, st: State) -> None:
        target = self.at.get(ins.argval)
        if target is None or ins.argval <= ins.offset:
            raise NotChecked("loops")
        st.pc = target

    def branch(self, st: State, cond: Any, jump_if: bool, ins: dis.Instruction, pop: bool = True) -> tuple:
        """Fork on the truth of `cond`; the tree always lists the true side first."""
        if not pop:
            st.stack.append(cond)
        if isinstance(cond, tuple) and cond[:1] == ("const",):
            truth = bool(ast.literal_eval(cond[2])) if cond[1] in ("int", "bool", "NoneType", "str") else None
            if truth is not None:
                if truth == jump_if:
                    self.jump_to(ins, st)
                elif not pop:
                    st.stack.pop()
                return self.run(st)
        while isinstance(cond, tuple) and cond[:1] == ("not",):
            cond, jump_if = cond[1], not jump_if
        if isinstance(cond, tuple) and cond[:1] == ("truth",):
            cond = cond[1]
        if isinstance(cond, tuple) and cond[:1] == ("is",):  # a pure test, written one way
            if cond[3] == ("const", "int", "1"):
                cond, jump_if = ("is", cond[1], cond[2], ("const", "int", "0")), not jump_if
            test: Any = cond
        elif isinstance(cond, Event) and st.events[cond.index][:1] == ("truth",):
            test = cond
        else:
            test = self.event(st, "truth", cond)
            if self.handler_for(ins) is not None:
                raise NotChecked("a truth test inside a try block")
        taken = copy.deepcopy(st)
        self.jump_to(ins, taken)
        if not pop:
            st.stack.pop()
        on_jump, on_fall = self.run(taken), self.run(st)
        true_side, false_side = (on_jump, on_fall) if jump_if else (on_fall, on_jump)
        return ("branch", self.render(test, st), true_side, false_side)

    def step(self, ins: dis.Instruction, st: State) -> tuple | None:
        op, arg, stack = ins.opname, ins.argval, st.stack
        oparg = ins.arg or 0
        if op in ("NOP", "RESUME", "PRECALL", "MAKE_CELL", "COPY_FREE_VARS", "END_FOR"):
            if op == "END_FOR":
                raise NotChecked("loops")
            return None
        if op in ("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_LOAD_FAST"):
            names = arg if isinstance(arg, tuple) else (arg,)
            for name in names:
                if name not in st.env:
                    raise NotChecked(f"a read of local {name} that may be unbound")
                stack.append(st.env[name])
            return None
        if op in ("STORE_FAST", "STORE_FAST_STORE_FAST", "STORE_FAST_LOAD_FAST"):
            names = arg if isinstance(arg, tuple) else (arg,)
            if op == "STORE_FAST_LOAD_FAST":
                st.env[names[0]] = stack.pop()
                stack.append(st.env[names[1]])
                return None
            for name in names:
                st.env[name] = stack.pop()
            return None
        if op == "DELETE_FAST":
            if arg not in st.env:
                raise NotChecked(f"deleting local {arg} that may be unbound")
            del st.env[arg]
            return None
        if op == "LOAD_CONST":
            # a nested code object is compared by identity: stepping gives the installed code Dynamo's own
            stack.append(("code", arg.co_name, id(arg)) if isinstance(arg, CodeType) else self.const(arg))
            return None
        if op == "MAKE_FUNCTION":
            code_value = stack.pop()
            parts: dict[int, Any] = {}
            if VERSION < (3, 13):
                for bit in (8, 4, 2, 1):
                    if oparg & bit:
                        parts[bit] = stack.pop()
            stack.append(self.function(code_value, parts))
            return None
        if op == "SET_FUNCTION_ATTRIBUTE":
            func, value = stack.pop(), stack.pop()
            if not (isinstance(func, tuple) and func[:1] == ("function",)):
                raise NotChecked("SET_FUNCTION_ATTRIBUTE on an unknown function")
            parts = dict(zip((8, 4, 2, 1), func[2:], strict=True))
            parts[oparg] = value
            stack.append(self.function(func[1], {k: v for k, v in parts.items() if v != NULL}))
            return None
        if op == "RETURN_CONST":
            return (*st.events, ("return", self.const(arg)))
        if op == "RETURN_VALUE":
            value = stack.pop()
            return (*st.events, ("return", self.render(value, st)))
        if op == "POP_TOP":
            stack.pop()
            return None
        if op == "PUSH_NULL":
            stack.append(NULL)
            return None
        if op == "COPY":
            stack.append(stack[-arg])
            return None
        if op == "SWAP":
            stack[-1], stack[-arg] = stack[-arg], stack[-1]
            return None
        if op == "LOAD_GLOBAL":
            name = arg
            push_null = bool(oparg & 1)
            value = ("global", name) if name.startswith(DYNAMO_GLOBALS) else self.event(st, "load global", name)
            if push_null and VERSION < (3, 13):
                stack.append(NULL)
            stack.append(value)
            if push_null and VERSION >= (3, 13):
                stack.append(NULL)
            return None
        if op in ("LOAD_ATTR", "LOAD_METHOD"):
            obj = stack.pop()
            method = op == "LOAD_METHOD" or (VERSION >= (3, 12) and bool(oparg & 1))
            if isinstance(obj, tuple) and obj[:1] == ("function",) and arg == "__closure__" and not method:
                stack.append(obj[2] if obj[2] != NULL else self.const(None))  # a function made here: its cells
                return None
            value = self.event(st, "getattr", obj, arg)
            if method and VERSION < (3, 13):
                stack += [NULL, value]
            elif method:
                stack += [value, NULL]
            else:
                stack.append(value)
            return None
        if op == "STORE_ATTR":
            obj, value = stack.pop(), stack.pop()
            self.event(st, "setattr", obj, arg, value)
            return None
        if op == "DELETE_ATTR":
            self.event(st, "delattr", stack.pop(), arg)
            return None
        if op in ("LOAD_DEREF", "LOAD_CLASSDEREF"):
            stack.append(self.event(st, "load cell", arg))
            return None
        if op == "STORE_DEREF":
            self.event(st, "store cell", arg, stack.pop())
            return None
        if op == "LOAD_CLOSURE":
            stack.append(("cell", arg))
            return None
        if op == "STORE_GLOBAL":
            self.event(st, "store global", arg, stack.pop())
            return None
        if op == "KW_NAMES":
            st.kw_names = self.const(arg)
            return None
        if op in ("CALL", "CALL_KW"):
            kw = stack.pop() if op == "CALL_KW" else st.kw_names
            st.kw_names = None
            items = stack[-(arg + 2):]
            del stack[-(arg + 2):]
            if VERSION >= (3, 13):
                func, self_or_null, args = items[0], items[1], items[2:]
                if self_or_null is not NULL:
                    args = [self_or_null, *args]
            elif items[0] is NULL:
                func, args = items[1], items[2:]
            else:
                func, args = items[0], items[1:]
            graph = isinstance(func, tuple) and func[:1] == ("global",) and func[1].startswith("__compiled_fn_")
            stack.append(self.event(st, "call", func, ("tuple", *args), kw or ("const", "tuple", ()),
                                    graph_output=graph))
            return None
        if op == "CALL_FUNCTION_EX":
            kwargs = stack.pop() if oparg & 1 else None
            args, func = stack.pop(), stack.pop()
            if VERSION >= (3, 13):
                null = func
                func = stack.pop()
            else:
                null = stack.pop()
            if null is not NULL:
                raise NotChecked("CALL_FUNCTION_EX with a self")
            positional = self.contents(args)
            graph = isinstance(func, tuple) and func[:1] == ("global",) and func[1].startswith("__compiled_fn_")
            pos = ("tuple", *positional) if positional is not None else ("star", args)
            stack.append(self.event(st, "call", func, pos, kwargs if kwargs is not None else ("const", "tuple", ()),
                                    graph_output=graph))
            return None
        if op == "BUILD_TUPLE":
            items = stack[len(stack) - arg:]
            del stack[len(stack) - arg:]
            stack.append(("tuple", *items))
            return None
        if op == "BUILD_LIST":
            items = stack[len(stack) - arg:]
            del stack[len(stack) - arg:]
            stack.append(self.new_list(items))
            return None
        if op == "BUILD_SLICE":
            items = stack[len(stack) - arg:]
            del stack[len(stack) - arg:]
            stack.append(("slice", *items))
            return None
        if op in ("LIST_EXTEND", "LIST_APPEND"):
            value = stack.pop()
            target = stack[-arg]
            if not isinstance(target, ListObj) or target.escaped:
                raise NotChecked(f"{op} on an unknown list")
            known = self.contents(value) if op == "LIST_EXTEND" else [value]
            if known is None:
                event = self.event(st, "iterate", value)
                known = [("star", event)]
            target.items.extend(known)
            return None
        if op in ("LIST_TO_TUPLE", "CALL_INTRINSIC_1"):
            if op == "CALL_INTRINSIC_1" and ins.argrepr != "INTRINSIC_LIST_TO_TUPLE":
                raise NotChecked(f"{ins.argrepr}")
            value = stack.pop()
            known = self.contents(value)
            if known is None:
                raise NotChecked("LIST_TO_TUPLE on an unknown list")
            stack.append(("tuple", *known))
            return None
        if op == "BUILD_MAP":
            items = stack[len(stack) - 2 * arg:]
            del stack[len(stack) - 2 * arg:]
            self._const_keys(items[0::2])
            pairs = [("tuple", k, v) for k, v in zip(items[0::2], items[1::2], strict=True)]
            stack.append(self.new_list(pairs, "dict"))
            return None
        if op == "BUILD_CONST_KEY_MAP":
            keys = stack.pop()
            values = stack[len(stack) - arg:]
            del stack[len(stack) - arg:]
            if keys[:2] != ("const", "tuple"):
                raise NotChecked("BUILD_CONST_KEY_MAP keys")
            key_list = list(keys[2])
            self._const_keys(key_list)
            stack.append(self.new_list([("tuple", k, v) for k, v in zip(key_list, values, strict=True)], "dict"))
            return None
        if op in ("DICT_MERGE", "DICT_UPDATE"):
            value = stack.pop()
            target = stack[-arg]
            if not isinstance(target, ListObj) or target.kind != "dict" or target.escaped:
                raise NotChecked(f"{op} on an unknown dict")
            if isinstance(value, ListObj) and value.kind == "dict" and not value.escaped:
                target.items.extend(value.items)
            else:
                target.items.append(("star", self.event(st, "merge mapping", value)))
            return None
        if op in ("BINARY_SUBSCR", "BINARY_SLICE"):
            if op == "BINARY_SLICE":
                stop, start = stack.pop(), stack.pop()
                key: Any = ("slice", start, stop)
            else:
                key = stack.pop()
            obj = stack.pop()
            stack.append(self.subscript(obj, key, st))
            return None
        if op in ("STORE_SUBSCR", "STORE_SLICE"):
            if op == "STORE_SLICE":
                stop, start = stack.pop(), stack.pop()
                key = ("slice", start, stop)
                obj = stack.pop()
                value = stack.pop()
            else:
                key, obj, value = stack.pop(), stack.pop(), stack.pop()
            if isinstance(obj, ListObj) and obj.kind == "list" and not obj.escaped:
                index = self.concrete(key)
                if isinstance(index, slice):
                    known = self.contents(value)
                    if known is None:
                        raise NotChecked("slice assignment from an unknown iterable")
                    obj.items[index] = known
                else:
                    obj.items[index] = value
            else:
                self.event(st, "setitem", obj, key, value)
            return None
        if op == "DELETE_SUBSCR":
            key, obj = stack.pop(), stack.pop()
            if isinstance(obj, ListObj) and obj.kind == "list" and not obj.escaped:
                del obj.items[self.concrete(key)]
            else:
                self.event(st, "delitem", obj, key)
            return None
        if op == "UNPACK_SEQUENCE":
            value = stack.pop()
            known = self.contents(value)
            if known is None:
                event = self.event(st, "unpack", value, arg)
                known = [("item", event, ("const", "int", repr(i))) for i in range(arg)]
            if len(known) != arg:
                raise NotChecked("unpacking a sequence of the wrong length")
            stack.extend(reversed(known))
            return None
        if op in ("BINARY_OP", "COMPARE_OP", "CONTAINS_OP"):
            right, left = stack.pop(), stack.pop()
            if VERSION >= (3, 13) and op == "COMPARE_OP" and oparg & 16:  # 3.13: also the truth of the result
                compared = self.event(st, op, ins.argrepr.replace("bool(", "").rstrip(")"), left, right)
                stack.append(self.event(st, "truth", compared))
            else:
                stack.append(self.event(st, op, ins.argrepr, left, right))
            return None
        if op in ("UNARY_NEGATIVE", "UNARY_INVERT", "UNARY_POSITIVE", "GET_LEN"):
            stack.append(self.event(st, op, stack.pop()))
            return None
        if op == "UNARY_NOT":
            stack.append(("not", self.event(st, "truth", stack.pop())))
            return None
        if op == "TO_BOOL":
            stack.append(self.event(st, "truth", stack.pop()))
            return None
        if op == "IS_OP":
            right, left = stack.pop(), stack.pop()
            stack.append(("is", left, right, ("const", "int", repr(arg))))
            return None
        if op in ("POP_JUMP_IF_FALSE", "POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_IF_TRUE", "POP_JUMP_FORWARD_IF_TRUE"):
            cond = stack.pop()
            return self.branch(st, cond, op.endswith("TRUE"), ins)
        if op in ("POP_JUMP_IF_NONE", "POP_JUMP_FORWARD_IF_NONE", "POP_JUMP_IF_NOT_NONE",
                  "POP_JUMP_FORWARD_IF_NOT_NONE"):
            value = stack.pop()
            cond = ("is", value, self.const(None), ("const", "int", "0"))
            return self.branch(st, ("truth", cond), not op.endswith("NOT_NONE"), ins)
        if op in ("JUMP_IF_FALSE_OR_POP", "JUMP_IF_TRUE_OR_POP"):
            cond = stack.pop()
            return self.branch(st, cond, op == "JUMP_IF_TRUE_OR_POP", ins, pop=False)
        if op in ("JUMP_FORWARD", "JUMP", "JUMP_NO_INTERRUPT"):
            self.jump_to(ins, st)
            return None
        if op == "PUSH_EXC_INFO":
            exc = stack.pop()
            self.event(st, "push exc info", exc)
            stack += [("previous exc info",), exc]
            return None
        if op == "POP_EXCEPT":
            if stack.pop() != ("previous exc info",):
                raise NotChecked("POP_EXCEPT of something else")
            self.event(st, "pop except")
            return None
        if op == "CHECK_EXC_MATCH":
            kind = stack.pop()
            stack.append(self.event(st, "exception matches", stack[-1], kind))
            return None
        if op == "RERAISE":
            exc = stack.pop()
            if oparg:
                stack.pop()  # the lasti the handler was given
            handler = self.handler_for(ins)
            if handler is None:
                return (*st.events, ("raise", self.render(exc, st)))
            self.go_to_handler(st, handler, exc)
            return None
        if op == "RAISE_VARARGS":
            if self.handler_for(ins) is not None:
                raise NotChecked("raise inside a try block")
            values = stack[len(stack) - arg:]
            del stack[len(stack) - arg:]
            return (*st.events, ("raise", *(self.render(v, st) for v in values)))
        if op in ("FORMAT_VALUE", "FORMAT_SIMPLE", "FORMAT_WITH_SPEC", "CONVERT_VALUE", "BUILD_STRING"):
            self._strings(ins, st)
            return None
        if op == "LOAD_ASSERTION_ERROR":
            stack.append(("assertion error",))
            return None
        raise NotChecked(f"opcode {op}")

    @staticmethod
    def function(code_value: Any, parts: dict[int, Any]) -> tuple:
        """A function made in this frame: (function, code, closure, annotations, kwdefaults, defaults)."""
        if not (isinstance(code_value, tuple) and code_value[:1] == ("code",)):
            raise NotChecked("MAKE_FUNCTION without a code constant")
        return ("function", code_value, *(parts.get(bit, NULL) for bit in (8, 4, 2, 1)))

    def _const_keys(self, keys: list[Any]) -> None:
        for key in keys:
            if not (isinstance(key, tuple) and key[:1] == ("const",) and key[1] in ("str", "int")):
                raise NotChecked("a dict key that is not a str or int constant")

    def subscript(self, obj: Any, key: Any, st: State) -> Any:
        known = self.contents(obj)
        if known is not None and not (isinstance(obj, ListObj) and obj.kind == "dict"):
            try:
                index = self.concrete(key)
                picked = known[index]
            except (NotChecked, IndexError, TypeError):
                return self.event(st, "getitem", obj, key)
            return self.new_list(picked) if isinstance(index, slice) and isinstance(obj, ListObj) else (
                ("tuple", *picked) if isinstance(index, slice) else picked)
        if isinstance(obj, Event) and obj.graph_output and isinstance(key, tuple) and key[:2] == ("const", "int"):
            return ("item", obj, key)
        return self.event(st, "getitem", obj, key)

    def _strings(self, ins: dis.Instruction, st: State) -> None:
        op, stack = ins.opname, st.stack
        if op == "BUILD_STRING":
            items = stack[len(stack) - ins.argval:]
            del stack[len(stack) - ins.argval:]
            stack.append(self.event(st, "join", ("tuple", *items)))
        elif op == "FORMAT_VALUE":
            spec = stack.pop() if (ins.arg or 0) & 0x04 else self.const("")
            stack.append(self.event(st, "format", stack.pop(), ("const", "int", repr((ins.arg or 0) & 3)), spec))
        elif op == "CONVERT_VALUE":
            stack.append(self.event(st, "convert", stack.pop(), ("const", "int", repr(ins.arg))))
        elif op == "FORMAT_WITH_SPEC":
            spec = stack.pop()
            stack.append(self.event(st, "format", stack.pop(), ("const", "int", "0"), spec))
        else:
            stack.append(self.event(st, "format", stack.pop(), ("const", "int", "0"), self.const("")))
