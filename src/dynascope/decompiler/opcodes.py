"""Every per-Python-version opcode difference the decompiler knows, in one place.

The rest of the decompiler only sees *canonical* instructions (`Instr`): one name per operation,
jump targets as offsets, and version-specific encodings (fused loads, inplace binary opcodes,
NULL-pushing bits) already unfolded.  Supporting a new CPython means editing this module.
"""

from __future__ import annotations

import dis
import sys
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

VERSION = sys.version_info[:2]
SUPPORTED_VERSIONS = ((3, 10), (3, 11), (3, 12), (3, 13))

# Opcodes that change nothing the decompiler models.
IGNORED = frozenset({
    "RESUME", "NOP", "PRECALL", "CACHE", "EXTENDED_ARG", "COPY_FREE_VARS", "MAKE_CELL",
    "GEN_START", "TO_BOOL", "SETUP_ANNOTATIONS", "INTERPRETER_EXIT",
    "PUSH_NULL_PLACEHOLDER",
})

# Pure renames: many spellings, one meaning.
RENAMES = {
    "JUMP_FORWARD": "JUMP", "JUMP_BACKWARD": "JUMP", "JUMP_ABSOLUTE": "JUMP",
    "JUMP_BACKWARD_NO_INTERRUPT": "JUMP", "JUMP_NO_INTERRUPT": "JUMP",
    "POP_JUMP_FORWARD_IF_FALSE": "POP_JUMP_IF_FALSE", "POP_JUMP_BACKWARD_IF_FALSE": "POP_JUMP_IF_FALSE",
    "POP_JUMP_FORWARD_IF_TRUE": "POP_JUMP_IF_TRUE", "POP_JUMP_BACKWARD_IF_TRUE": "POP_JUMP_IF_TRUE",
    "POP_JUMP_FORWARD_IF_NONE": "POP_JUMP_IF_NONE", "POP_JUMP_BACKWARD_IF_NONE": "POP_JUMP_IF_NONE",
    "POP_JUMP_FORWARD_IF_NOT_NONE": "POP_JUMP_IF_NOT_NONE",
    "POP_JUMP_BACKWARD_IF_NOT_NONE": "POP_JUMP_IF_NOT_NONE",
    "LOAD_FAST_CHECK": "LOAD_FAST",
    "DUP_TOP": "COPY_1", "ROT_TWO": "SWAP_2",
}

# 3.10's one-opcode-per-operator binary ops, mapped to the 3.11+ BINARY_OP spelling.
_OPERATOR_OPCODES = {
    "ADD": "+", "SUBTRACT": "-", "MULTIPLY": "*", "TRUE_DIVIDE": "/", "FLOOR_DIVIDE": "//",
    "MODULO": "%", "POWER": "**", "MATRIX_MULTIPLY": "@", "LSHIFT": "<<", "RSHIFT": ">>",
    "AND": "&", "OR": "|", "XOR": "^",
}
LEGACY_BINARY = {f"BINARY_{k}": v for k, v in _OPERATOR_OPCODES.items()}
LEGACY_BINARY.update({f"INPLACE_{k}": v + "=" for k, v in _OPERATOR_OPCODES.items()})


class Features(TypedDict):
    global_null: bool  # LOAD_GLOBAL pushes NULL
    attr_method: bool  # LOAD_ATTR has the method bit
    for_iter_pops: bool  # FOR_ITER pops the iterator when done
    end_for_pops: int  # values END_FOR pops
    call: Literal["legacy", "null"]  # call protocol
    exception_values: int  # values one caught exception takes on the stack
    match_pushes_bool: bool  # MATCH_CLASS and MATCH_KEYS also push a success flag


# Per-version behaviour switches.  Add a row to support a new version.
_FEATURES: dict[tuple[int, int], Features] = {
    (3, 10): {"global_null": False, "attr_method": False, "for_iter_pops": True, "end_for_pops": 0,
              "call": "legacy", "exception_values": 3, "match_pushes_bool": True},
    (3, 11): {"global_null": True, "attr_method": False, "for_iter_pops": True, "end_for_pops": 0,
              "call": "null", "exception_values": 1, "match_pushes_bool": False},
    (3, 12): {"global_null": True, "attr_method": True, "for_iter_pops": False, "end_for_pops": 2,
              "call": "null", "exception_values": 1, "match_pushes_bool": False},
    (3, 13): {"global_null": True, "attr_method": True, "for_iter_pops": False, "end_for_pops": 1,
              "call": "null", "exception_values": 1, "match_pushes_bool": False},
}
FEATURES = _FEATURES.get(VERSION, _FEATURES[max(_FEATURES)])
# 3.13 assembles LOAD_CLOSURE (push the cell itself) as LOAD_FAST of the cell's slot
CELL_LOADS_ARE_FAST = VERSION >= (3, 13)

JUMP_OPS = frozenset({"JUMP"})
CONDITIONAL_JUMPS = frozenset({
    "POP_JUMP_IF_FALSE", "POP_JUMP_IF_TRUE", "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE",
    "JUMP_IF_FALSE_OR_POP", "JUMP_IF_TRUE_OR_POP", "JUMP_IF_NOT_EXC_MATCH",
})
# Instructions that cannot raise, which the exception table may leave uncovered in the middle of a
# protected run (a return inside `with`; 3.13's conditional jumps, which take an exact bool)
NON_RAISING = frozenset({"RETURN_VALUE"}) | (CONDITIONAL_JUMPS if VERSION >= (3, 13) else frozenset())
TERMINATORS = frozenset({"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE"})
BRANCHING = JUMP_OPS | CONDITIONAL_JUMPS | {"FOR_ITER", "SEND"}

CONVERSIONS = {0: -1, 1: ord("s"), 2: ord("r"), 3: ord("a")}


@dataclass
class Instr:
    """A canonical instruction. `target` is the jump target offset, or None."""

    name: str
    arg: int | None
    argval: Any
    offset: int
    target: int | None = None
    line: int | None = None
    original: str = ""

    def __repr__(self) -> str:
        return f"<{self.offset} {self.name} {self.argval!r}>"


def canonical_instructions(code) -> list[Instr]:
    """The code object's instructions in canonical form (fused opcodes split, renames applied)."""
    result: list[Instr] = []
    handler_starts = {target for _s, _e, target, _d, _l in exception_entries(code)} if VERSION < (3, 11) else set()
    cells = set(code.co_cellvars) | set(code.co_freevars)
    line = None
    raws = list(dis.get_instructions(code))
    folded = _delegation_loops(raws)
    async_exits = _async_for_exits(code, raws)
    inlined = _inlined_comprehension_slots(raws, cells)
    for raw in raws:
        if raw.offset in folded:
            continue
        if raw.offset in async_exits:  # GET_ANEXT: the async iterator's FOR_ITER
            folded.update(async_exits[raw.offset][1])
            result.append(Instr("FOR_ITER", None, "async", raw.offset, async_exits[raw.offset][0], line, raw.opname))
            continue
        if sys.version_info >= (3, 13):  # starts_line is a bool from 3.13; the number is line_number
            if raw.line_number is not None:
                line = raw.line_number
        elif raw.starts_line is not None:
            line = raw.starts_line
        if raw.offset - 1 in handler_starts:  # 3.10: make the handler look like 3.11's
            result.append(Instr("PUSH_EXC_INFO", None, None, raw.offset - 1, line=line, original="(handler)"))
        for ins in _canonicalize(raw):
            if ins.name == "LOAD_FAST" and ins.argval in cells and CELL_LOADS_ARE_FAST \
                    and not _holds_value(ins.argval, raw.offset, inlined):  # a cell, not its value
                ins.name = "LOAD_CLOSURE"
            ins.line = line
            ins.original = raw.opname
            result.append(ins)
    return result


def _inlined_comprehension_slots(raws: list, cells: set) -> list[tuple[str, int, int]]:
    """3.13 inlines a comprehension whose variable is a cell of the function by clearing the slot
    (LOAD_FAST_AND_CLEAR) and keeping plain values in it until its loop ends: (name, from, to)."""
    ranges = []
    for i, ins in enumerate(raws):
        if ins.opname == "LOAD_FAST_AND_CLEAR" and ins.argval in cells:
            loop = next((r for r in raws[i + 1:] if r.opname == "FOR_ITER"), None)
            if loop is not None:
                ranges.append((ins.argval, ins.offset, loop.argval))
    return ranges


def _holds_value(name: str, offset: int, ranges: list) -> bool:
    return any(n == name and start <= offset < end for n, start, end in ranges)


def _delegation_loops(raws: list) -> set[int]:
    """3.11+ compile `yield from x` / `await x` as a loop: SEND, YIELD_VALUE, RESUME, a jump back
    to SEND, then (3.12+) END_SEND, plus a CLEANUP_THROW handler that jumps to it.  SEND becomes
    one YIELD_FROM (3.10's opcode); the offsets of the rest of the loop are returned, to drop."""
    dropped: set[int] = set()
    for i, ins in enumerate(raws):
        if ins.opname == "SEND":
            loop = raws[i + 1:i + 4]
            if ([r.opname for r in loop[:2]] != ["YIELD_VALUE", "RESUME"] or len(loop) < 3
                    or loop[2].opname not in ("JUMP_BACKWARD_NO_INTERRUPT", "JUMP_NO_INTERRUPT")
                    or loop[2].argval != ins.offset):
                continue  # not the shape we know: SEND stays, and has no handler
            dropped.update(r.offset for r in loop)
            after = next((r for r in raws if r.offset == ins.argval), None)
            if after is not None and after.opname == "END_SEND":
                dropped.add(after.offset)
        elif ins.opname == "CLEANUP_THROW" and i + 1 < len(raws):
            dropped.add(ins.offset)
            if raws[i + 1].opname.startswith("JUMP"):
                dropped.add(raws[i + 1].offset)
    return dropped


def _async_for_exits(code, raws: list) -> dict[int, tuple[int, list[int]]]:
    """`async for` asks GET_ANEXT for an awaitable, awaits it, and leaves the loop when that raises
    StopAsyncIteration: a handler running END_ASYNC_FOR.  Read as a FOR_ITER whose exhausted branch
    is that handler: {GET_ANEXT offset: (END_ASYNC_FOR offset, offsets of the await to drop)}."""
    at = {r.offset: i for i, r in enumerate(raws)}
    result = {}
    for i, ins in enumerate(raws):
        if ins.opname != "GET_ANEXT" or i + 2 >= len(raws) or raws[i + 1].opname != "LOAD_CONST":
            continue
        if raws[i + 2].opname not in ("SEND", "YIELD_FROM"):
            continue
        handler = next((t for s, e, t, _d, _l in _raw_exception_entries(code) if s <= ins.offset < e), None)
        exit_ = _async_for_exit(raws, at, handler)
        if exit_ is not None:
            result[ins.offset] = (exit_.offset, [raws[i + 1].offset, raws[i + 2].offset])
    return result


def _async_for_exit(raws: list, at: dict, handler: int | None):
    """The END_ASYNC_FOR a handler runs (3.10's handlers start one before, at the synthetic PUSH_EXC_INFO)."""
    for offset in (handler, (handler or 0) + 1):
        if offset in at and raws[at[offset]].opname == "END_ASYNC_FOR":
            return raws[at[offset]]
    return None


def _jump_target(raw) -> int | None:
    if raw.opcode in dis.hasjrel or raw.opcode in dis.hasjabs:
        return raw.argval
    return None


def _canonicalize(raw) -> list[Instr]:
    name, arg, argval, off = raw.opname, raw.arg, raw.argval, raw.offset
    if name in IGNORED:
        return []
    name = RENAMES.get(name, name)
    if name == "COPY_1":
        return [Instr("COPY", 1, 1, off)]
    if name == "SWAP_2":
        return [Instr("SWAP", 2, 2, off)]
    if name == "ROT_THREE":
        return [Instr("SWAP", 3, 3, off), Instr("SWAP", 2, 2, off)]
    if name == "ROT_FOUR":
        return [Instr("SWAP", 4, 4, off), Instr("SWAP", 3, 3, off), Instr("SWAP", 2, 2, off)]
    if name == "ROT_N":
        return [Instr("SWAP", k, k, off) for k in range(arg, 1, -1)]
    if name == "DUP_TOP_TWO":
        return [Instr("COPY", 2, 2, off), Instr("COPY", 2, 2, off)]
    if name in LEGACY_BINARY:
        return [Instr("BINARY_OP", None, LEGACY_BINARY[name], off)]
    if name == "BINARY_OP":
        return [Instr("BINARY_OP", arg, raw.argrepr, off)]
    if name in ("LOAD_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST", "STORE_FAST_LOAD_FAST"):
        first, second = name.split("_FAST_", 1)
        first_name, second_name = argval
        return [Instr(first + "_FAST", None, first_name, off), Instr(second, None, second_name, off)]
    if name == "LOAD_GLOBAL" and FEATURES["global_null"] and arg & 1:
        if VERSION >= (3, 13):  # 3.13 pushes the NULL after the global ("open + NULL")
            return [Instr("LOAD_GLOBAL", arg, argval, off), Instr("PUSH_NULL_AFTER", None, None, off)]
        return [Instr("PUSH_NULL", None, None, off), Instr("LOAD_GLOBAL", arg, argval, off)]
    if name == "LOAD_ATTR" and FEATURES["attr_method"] and arg & 1:
        return [Instr("LOAD_METHOD", arg, argval, off)]
    if name == "COMPARE_OP":
        return [Instr("COMPARE_OP", arg, str(argval).replace("bool(", "").rstrip(")"), off)]
    if name == "FORMAT_VALUE":  # 3.10-3.12: conversion and has-spec packed in the arg
        conversion = CONVERSIONS[arg & 3]
        return [Instr("FORMAT", arg, (conversion, bool(arg & 4)), off)]
    if name == "CONVERT_VALUE":
        return [Instr("CONVERT_VALUE", arg, CONVERSIONS[arg], off)]
    if name == "FORMAT_SIMPLE":
        return [Instr("FORMAT", None, (-1, False), off)]
    if name == "FORMAT_WITH_SPEC":
        return [Instr("FORMAT", None, (-1, True), off)]
    if name in ("BINARY_SLICE", "STORE_SLICE"):  # 3.12+: `x[a:b]` without a slice object, as 3.11 spells it
        subscript = "BINARY_SUBSCR" if name == "BINARY_SLICE" else "STORE_SUBSCR"
        return [Instr("BUILD_SLICE", 2, 2, off), Instr(subscript, None, None, off)]
    if name == "RETURN_CONST":
        return [Instr("LOAD_CONST", arg, argval, off), Instr("RETURN_VALUE", None, None, off)]
    if name == "END_FOR":
        return [Instr("POP_TOP", None, None, off)] * FEATURES["end_for_pops"] if FEATURES["end_for_pops"] else []
    if name == "CALL_INTRINSIC_2" and "PREP_RERAISE_STAR" in raw.argrepr:  # 3.12+ spelling of 3.11's opcode
        return [Instr("PREP_RERAISE_STAR", None, None, off)]
    if name == "CALL_INTRINSIC_1":  # argval is a number; the name is what tells them apart
        return [Instr(name, arg, raw.argrepr, off)]
    if name in ("SETUP_FINALLY", "SETUP_ASYNC_WITH", "POP_BLOCK"):  # 3.10: already turned into an exception table
        return []
    if name == "JUMP_IF_NOT_EXC_MATCH":  # 3.10; DUP_TOP before it stands in for 3.11's kept copy
        return [Instr("CHECK_EXC_MATCH", None, None, off), Instr("POP_JUMP_IF_FALSE", None, argval, off, argval)]
    if name == "END_ASYNC_FOR":  # reached as a FOR_ITER's exhausted branch (_async_for_exits)
        return [Instr("POP_TOP", None, None, off)] * (0 if FEATURES["for_iter_pops"] else 2)
    if name in ("ASYNC_GEN_WRAP", "BEFORE_ASYNC_WITH"):
        return [Instr("ASYNC_GEN_WRAP" if name == "ASYNC_GEN_WRAP" else "BEFORE_WITH", None, "async", off)]
    if name == "SEND":  # the rest of its loop is dropped by _delegation_loops
        return [Instr("YIELD_FROM", None, None, off)]
    if name == "SETUP_WITH":
        return [Instr("BEFORE_WITH", None, None, off)]
    if name == "CALL_FUNCTION":
        return [Instr("CALL_LEGACY", arg, argval, off)]
    if name == "CALL_METHOD":
        return [Instr("CALL_METHOD_LEGACY", arg, argval, off)]
    if name == "CALL_FUNCTION_KW":
        return [Instr("CALL_KW_LEGACY", arg, argval, off)]
    ins = Instr(name, arg, argval, off, _jump_target(raw))
    return [ins]


def exception_entries(code) -> list[tuple[int, int, int, int, bool]]:
    """(start, end, handler, stack depth, push lasti), as 3.11+ exception tables have them; less
    the `async for` exits, which canonical_instructions turns into FOR_ITER branches."""
    raws = list(dis.get_instructions(code))
    at = {r.offset: i for i, r in enumerate(raws)}
    return [e for e in _raw_exception_entries(code) if _async_for_exit(raws, at, e[2]) is None]


def _raw_exception_entries(code) -> list[tuple[int, int, int, int, bool]]:
    if sys.version_info < (3, 11):
        return _legacy_exception_entries(code)
    bytecode: Any = dis.Bytecode(code)  # its exception_entries (3.11+) is not in typeshed
    return [(e.start, e.end, e.target, e.depth, e.lasti) for e in bytecode.exception_entries]


_HANDLER_CLEANUP = ["LOAD_CONST", "STORE_FAST", "DELETE_FAST", "RERAISE"]


def _legacy_exception_entries(code) -> list[tuple[int, int, int, int, bool]]:
    """3.10 keeps a block stack (SETUP_FINALLY/SETUP_WITH ... POP_BLOCK); derive the table from it.
    A handler the user wrote is given the offset just before its first instruction, where
    `canonical_instructions` puts a synthetic PUSH_EXC_INFO."""
    raw = list(dis.get_instructions(code))
    index = {ins.offset: i for i, ins in enumerate(raw)}
    depth = stack_effects(code)
    blocks_at: dict[int, tuple] = {}
    work: list[tuple[int, tuple]] = [(0, ())]
    while work:
        i, blocks = work.pop()
        while i < len(raw) and raw[i].offset not in blocks_at:
            ins = raw[i]
            blocks_at[ins.offset] = blocks
            target = _jump_target(ins)
            if ins.opname in ("SETUP_FINALLY", "SETUP_WITH", "SETUP_ASYNC_WITH"):
                assert target is not None  # SETUP_* name their handler
                work.append((index[target], blocks))
                blocks = (*blocks, (target, depth.get(ins.offset, 0)))
            elif ins.opname == "POP_BLOCK":
                blocks = blocks[:-1]
            elif target is not None:
                work.append((index[target], blocks))
            if ins.opname in TERMINATORS or RENAMES.get(ins.opname, ins.opname) == "JUMP":
                break
            i += 1
    synthetic = set()
    for blocks in blocks_at.values():
        for target, _level in blocks:
            names = [r.opname for r in raw[index[target]:index[target] + 4]]
            if names != _HANDLER_CLEANUP:
                synthetic.add(target - 1)
    entries: list[tuple[int, int, int, int, bool]] = []
    for i, ins in enumerate(raw):
        open_blocks = blocks_at.get(ins.offset)
        if not open_blocks:
            continue
        target, level = open_blocks[-1]
        names = [r.opname for r in raw[index[target]:index[target] + 4]]
        handler = target if names == _HANDLER_CLEANUP else target - 1
        end = raw[i + 1].offset if i + 1 < len(raw) else ins.offset + 2
        end = end - 1 if end - 1 in synthetic else end
        start = ins.offset - 1 if ins.offset - 1 in synthetic else ins.offset  # cover the PUSH_EXC_INFO too
        if entries and entries[-1][2] == handler and entries[-1][1] == ins.offset:
            entries[-1] = (entries[-1][0], end, handler, level, False)
        else:
            entries.append((start, end, handler, level, False))
    return entries


def stack_effects(code) -> dict[int, int]:
    """Stack depth before each original instruction offset, found by walking every edge."""
    raw = list(dis.get_instructions(code))
    index = {ins.offset: i for i, ins in enumerate(raw)}
    depth: dict[int, int] = {}
    work = [(0, 0)]
    table = exception_entries(code) if VERSION >= (3, 11) else []  # 3.10: SETUP_* edges cover it
    for _start, _end, handler, handler_depth, lasti in table:
        work.append((index[handler], handler_depth + int(lasti) + 1))
    while work:
        i, d = work.pop()
        while i < len(raw):
            ins = raw[i]
            if ins.offset in depth:
                break
            depth[ins.offset] = d
            name = ins.opname
            arg = ins.arg if ins.opcode >= dis.HAVE_ARGUMENT else None
            target = _jump_target(ins)
            if target is not None:
                work.append((index[target], d + dis.stack_effect(ins.opcode, arg, jump=True)))
            if name in TERMINATORS or name in ("RETURN_CONST",) or RENAMES.get(name, name) == "JUMP":
                break
            if target is not None:
                d += dis.stack_effect(ins.opcode, arg, jump=False)
            else:
                d += dis.stack_effect(ins.opcode, arg)
            i += 1
    return depth
