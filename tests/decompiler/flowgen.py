"""Random small functions mixing loops, try/except/else/finally, with, break/continue/return/raise:
the decompiler must turn each into equivalent source or refuse (DecompileError), never get it wrong."""

from __future__ import annotations

import random


class Ctx:
    def __init__(self, log):
        self.log = log

    def __enter__(self):
        self.log.append("in")
        return self

    def __exit__(self, kind, value, tb):
        self.log.append("out")
        return kind is KeyError  # swallows KeyError


def source(seed: int) -> str:
    """`def f(x)` returning (log, x); every statement logs or changes x, so paths are observable."""
    rnd, counter = random.Random(seed), [0]
    body = _block(0, False, rnd, counter)
    return "def f(x):\n    log = []\n" + "\n".join("    " + line for line in body) + "\n    return log, x\n"


def _block(depth, in_loop, rnd, counter):
    return [line for _ in range(rnd.randint(1, 3)) for line in _statement(depth, in_loop, rnd, counter)]


def _indent(lines):
    return ["    " + line for line in lines]


def _statement(depth, in_loop, rnd, counter):
    counter[0] += 1
    k = counter[0]
    kinds = ["append", "append", "assign", "return", "raise"]
    kinds += ["if", "ifelse", "for", "while", "try", "tryfinally", "with"] if depth < 3 else []
    kinds += ["break", "continue"] if in_loop else []
    kind = rnd.choice(kinds)
    nested = lambda loop=in_loop: _indent(_block(depth + 1, loop, rnd, counter))  # noqa: E731
    if kind == "append":
        return [f"log.append({k})"]
    if kind == "assign":
        return [f"x = (x * 3 + {k}) % 7"]
    if kind == "return":
        return [f"if x % 3 == {k % 3}:", f"    return log, {k}"]
    if kind == "raise":
        return [f"if x % 4 == {k % 4}:", f"    raise {'KeyError' if k % 2 else 'ValueError'}({k})"]
    if kind == "break":
        return [f"if x % 2 == {k % 2}:", "    break"]
    if kind == "continue":
        return [f"if (x + {k}) % 3 == 0:", "    x += 1", "    continue"]
    if kind == "if":
        return [f"if x > {k % 5}:", *nested()]
    if kind == "ifelse":
        return [f"if x < {k % 4}:", *nested(), "else:", *nested()]
    if kind == "for":
        lines = [f"for i{k} in range(x % 4 + 1):", f"    x = (x + i{k}) % 9", *nested(True)]
        return lines + (["else:", *nested()] if rnd.random() < 0.4 else [])
    if kind == "while":
        lines = [f"w{k} = 0", f"while w{k} < 3:", f"    w{k} += 1", "    x = (x + 1) % 9", *nested(True)]
        return lines + (["else:", *nested()] if rnd.random() < 0.3 else [])
    if kind == "try":
        lines = ["try:", *nested(), "except ValueError:", *nested()]
        lines += ["else:", *nested()] if rnd.random() < 0.4 else []
        return lines + (["finally:", f"    log.append('f{k}')"] if rnd.random() < 0.4 else [])
    if kind == "tryfinally":  # half of them with a finally body that branches (CPython copies its end)
        final = nested() if rnd.random() < 0.5 else [f"    log.append('f{k}')"]
        return ["try:", *nested(), "finally:", *final]
    return ["with Ctx(log):", *nested()]


def outcome(func, x):
    try:
        return ("ok", func(x))
    except Exception as exc:  # noqa: BLE001 - what each version raises is compared
        return ("raised", type(exc).__name__, str(exc))
