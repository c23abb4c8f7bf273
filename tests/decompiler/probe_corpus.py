"""Round-trip probe: decompile each sample function, exec the result, compare behaviour.

Test data, not product code: the decompiler's tests import it (tests/decompiler/test_decompiler.py).
Run as `python tests/decompiler/probe_corpus.py` (with PYTHONPATH=src on a bare interpreter).
Prints one row per function and ends with `decompiler probe: N/M passed (python X.Y)`.
"""

from __future__ import annotations

import copy
import inspect
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dynascope.decompiler import decompile_or_dis

CALL_TIMEOUT_S = 5.0
SAMPLES: list[Sample] = []


@dataclass
class Sample:
    func: Callable
    inputs: list = field(default_factory=list)


def sample(*inputs):
    """Register a probe function with the argument tuples (or (args, kwargs) pairs) to try."""

    def register(func):
        SAMPLES.append(Sample(func, list(inputs)))
        return func

    return register


# ---------------------------------------------------------------------------------------------
# control flow
@sample((1, 2), (5, 0), (-3, 1))
def if_else(a, b):
    x = a + b * 2
    if x > 3:
        y = x - 1
    elif x == 1:
        y = 100
    else:
        y = -x
    return y


@sample(([1, -2, 3, 200, 5],), ([],), ([1, 2, 3],))
def for_break_continue_else(xs):
    total = 0
    for x in xs:
        if x < 0:
            continue
        if x > 100:
            break
        total += x
    else:
        total = -total
    return total


@sample((10,), (0,), (7,))
def while_loop(n):
    steps = 0
    while n > 1:
        if n % 2:
            n = 3 * n + 1
        else:
            n //= 2
        steps += 1
    return steps


@sample(([1, -2, 3, -4, 5],), ([],))
def while_continue(xs):
    out = []
    i = 0
    while i < len(xs):
        i += 1
        if xs[i - 1] < 0:
            continue
        out.append(xs[i - 1])
    return out


@sample((0, 5), (3, 3))
def while_after_same_statement(i, n):
    seen = []
    i += 1
    while i < n:
        seen.append(i)
        if i == 2:
            i += 2
            continue
        i += 1
    return seen


@sample((5,), (50,), (-1,))
def while_true_break(limit):
    i = 0
    while True:
        i += 3
        if i > limit:
            break
    return i


@sample(([3, 4, 5],), ([2, 9],), ([8],))
def while_else(xs):
    i = 0
    while i < len(xs):
        if xs[i] == 4:
            found = i
            break
        i += 1
    else:
        found = None
    return found


@sample(([[1, 2], [3, 4]],), ([[0, -1, 5]],), ([],))
def nested_loops(rows):
    out = []
    for row in rows:
        for v in row:
            if v == 0:
                continue
            if v < 0:
                break
            out.append(v * 10)
        out.append("|")
    return out


@sample((1, 2, 3), (3, 2, 1), (1, 1, 1), (0, 5, 5))
def chained_comparisons(a, b, c):
    r = []
    if a < b < c:
        r.append("inc")
    if a == b == c:
        r.append("eq")
    r.append(0 <= a < 2)
    return r


@sample((0, 1), (2, 0), ("", "x"), (None, [1]))
def boolean_ops(a, b):
    x = a and b
    y = a or b
    z = not a
    w = (a or b) and not (a and b)
    if a and b or not a:
        w = (w, "branch")
    return x, y, z, w


@sample((1,), (-5,), (0,))
def ternary(x):
    sign = "pos" if x > 0 else "neg" if x < 0 else "zero"
    return sign, (x if x else None)


@sample(([1, 2, 3, 4],), ([5],))
def walrus(xs):
    if (n := len(xs)) > 2:
        return n, [y for x in xs if (y := x * 2) > 4]
    return n


@sample((4,), (0,))
def early_returns(n):
    for i in range(n):
        if i * i > n:
            return i
    return -1


# ---------------------------------------------------------------------------------------------
# exceptions and with
@sample((4, 2), (1, 0), ("a", 1))
def try_except(a, b):
    try:
        r = a / b
    except ZeroDivisionError:
        r = "div0"
    except TypeError as e:
        r = f"type:{type(e).__name__}"
    return r


@sample((4, 2), (1, 0))
def try_except_else(a, b):
    log = []
    try:
        q = a // b
    except ZeroDivisionError as err:
        log.append(str(err))
        q = None
    else:
        log.append("ok")
    return q, log


@sample((1,), (0,))
def try_finally(x):
    log = []
    try:
        log.append(10 / x)
    finally:
        log.append("finally")
    return log


@sample((1,), ("x",))
def bare_except(x):
    try:
        return x + 1
    except:  # noqa: E722
        return "bad"


@sample((3,), (0,))
def raise_in_except(x):
    try:
        return 10 // x
    except ZeroDivisionError:
        raise ValueError("zero")


class Recorder:
    def __init__(self):
        self.events = []

    def __enter__(self):
        self.events.append("enter")
        return self

    def __exit__(self, *exc):
        self.events.append("exit")
        return False


@sample((1,), (0,))
def with_statement(x):
    rec = Recorder()
    with rec as r:
        r.events.append(x)
    with rec:
        rec.events.append("again")
    return rec.events


@sample((2,), (0,))
def with_return(x):
    rec = Recorder()
    with rec:
        if x:
            return rec.events + ["early"]
    return rec.events


@sample((5,), (-5,))
def assert_with_message(x):
    assert x > 0, f"x must be positive, got {x}"
    assert x < 100
    return x


# ---------------------------------------------------------------------------------------------
# expressions
@sample((3.14159, "ab"), (2, "c"))
def fstrings(x, s):
    return f"{x!r}|{s!s:>5}|{x:.2f}|{s!a}|{x:{len(s)}}|{{lit}}|{x=}"


@sample(([1, 2, 3, 4],), ([],))
def comprehensions(xs):
    a = [x * 2 for x in xs if x % 2]
    b = {x: x * x for x in xs}
    c = {x % 3 for x in xs}
    d = list(x + 1 for x in xs)
    e = [(i, j) for i in xs for j in range(i) if j]
    return a, b, c, d, e


@sample((1, 2), (5, 7))
def tuple_swap(a, b):
    a, b = b, a
    c, (d, e) = a, (b, a + b)
    first, *rest = [a, b, c, d, e]
    return a, b, c, d, e, first, rest


@sample(([1, 2],), ([5, 6, 7],))
def augmented_subscript(xs):
    xs[0] += 10
    xs[-1] *= 2
    d = {"k": 1}
    d["k"] -= 5
    return xs, d


class Box:
    def __init__(self, v):
        self.v = v
        self.inner = self if v > 100 else None


@sample((3,), (-2,))
def augmented_attribute(v):
    b = Box(v)
    b.v += 1
    b.v **= 2
    b.v //= 3
    return b.v


@sample((1, 2), (3, 4))
def star_args_call(a, b):
    def f(*args, **kwargs):
        return args, sorted(kwargs.items())

    extra = {"z": 9}
    return f(a, *[b, b], k=a, **extra), f(*(a, b)), f(**extra)


@sample(((1, 2, 3), {"x": 5}), ((), {}))
def varargs_kwargs(*args, **kwargs):
    return len(args), sorted(kwargs), args[:2]


@sample(((1,), {"scale": 3}), ((2,), {}))
def keyword_only(x, *, scale=2, offset=1):
    return x * scale + offset


@sample((1, 2), (3,))
def defaults(a, b=10, c="c"):
    return a, b, c


@sample((3,), (0,))
def lambdas(n):
    add = lambda x, y=1: x + y  # noqa: E731
    key = sorted(range(n), key=lambda v: -v)
    return add(n), add(n, 5), key


@sample((4,), (1,))
def closures(n):
    def make_counter(start):
        count = start

        def inc(step=1):
            nonlocal count
            count += step
            return count

        return inc

    c = make_counter(n)
    c()
    return c(10)


@sample((2,), (3,))
def nested_function(n):
    def square(v):
        return v * v

    def apply(fn, v):
        return fn(v) + n

    return apply(square, n)


def _twice(fn):
    def wrapper(*args):
        return fn(*args) * 2

    return wrapper


@sample((3,), (-1,))
def decorator_use(x):
    @_twice
    def inner(y):
        return y + 1

    return inner(x)


GLOBAL_COUNTER = 0


@sample((1,), (5,))
def global_statement(step):
    global GLOBAL_COUNTER
    GLOBAL_COUNTER += step
    value = GLOBAL_COUNTER
    GLOBAL_COUNTER = 0
    return value


@sample(([1, 2, 3, 4, 5],), ("hello",))
def slicing(xs):
    return xs[1:3], xs[::-1], xs[:2], xs[-2:], xs[::2]


@sample((1, 2), (0, -1))
def containers(a, b):
    t = (a, b, *[a])
    l = [a, *t, b]
    s = {a, b}
    d = {"a": a, **{"b": b}}
    return t, l, sorted(s), d


@sample((6,), (-3,))
def unary_and_bits(x):
    return -x, +x, ~x, not x, x & 3, x | 8, x ^ 5, x << 2, x >> 1, x % 4, x ** 2


@sample(([3, 1, 2],), ([],))
def method_calls(xs):
    ys = sorted(xs, reverse=True)
    xs.sort()
    return ys, xs, " ".join(str(v) for v in ys).upper()


@sample((1, "a"), (None, None))
def is_and_in(a, b):
    return a is None, b is not None, a in (1, 2), b not in "abc" if b else None


@sample(([1, 2, 3],))
def del_statements(xs):
    d = {"a": 1, "b": 2}
    del d["a"]
    del xs[0]
    tmp = 5
    del tmp
    return d, xs


# ---------------------------------------------------------------------------------------------
# match statements
@sample(([1, 2],), ({"k": 3},), (5,), ("s",), ([1, 2, 3],), (Box(1),))
def match_statement(value):
    match value:
        case [a, b]:
            return ("pair", a, b)
        case {"k": v}:
            return ("map", v)
        case int() if value > 3:
            return "big int"
        case str() | bytes():
            return "text"
        case Box(v=inner):
            return ("box", inner)
        case _:
            return "other"


class Point:
    __match_args__ = ("x", "y")

    def __init__(self, x, y):
        self.x, self.y = x, y


@sample((Point(0, 5),), (Point(3, 4),), (7,), ("s",))
def match_positional(value):
    match value:
        case Point(0, y):
            return ("on y axis", y)
        case Point(x, y=yy):
            return ("point", x, yy)
        case int(n):
            return ("int", n)
    return "other"


@sample((1,), (2,), (9,))
def match_literals(x):
    match x:
        case 1:
            return "one"
        case 2 | 3:
            return "two-three"
    return "many"


# ---------------------------------------------------------------------------------------------
# Dynamo-shaped code: values kept on the stack across a branch, list plumbing, resume calls
def _resume(fns, values, b, x):
    return (tuple(fns), tuple(values), b, x)


@sample((1.0, 2.0), (1.0, -2.0))
def data_dependent_branch(a, b):
    x = a / (abs(a) + 1)
    if b < 0:
        b = b * -1
    return x * b


@sample((1, 2), (-1, 0))
def resume_call_shape(a, b):
    args = [[], []]
    args.extend([b, a])
    return _resume(*args)


# ---------------------------------------------------------------------------------------------
# try statements whose clauses leave early, loop exits to an outer loop, comprehensions
@sample((5,), (0,), ("a",))
def try_except_else_finally_return(x):
    log = []
    try:
        v = 10 // x
    except ZeroDivisionError:
        return "zero", log
    except TypeError as e:
        return "type", str(e)[:5], log
    else:
        log.append(v)
    finally:
        log.append("fin")
    return v, log


@sample((5,), (0,), (-5,))
def try_except_else_all_return(x):
    try:
        v = 10 // x
    except ZeroDivisionError:
        return "zero"
    else:
        if v < 0:
            return "negative"
        v += 1
    return v


@sample((2,), (0,), (None,))
def try_except_return_else_loop(x):
    out = []
    try:
        n = 4 // x
    except (ZeroDivisionError, TypeError):
        return out
    else:
        for i in range(n):
            out.append(i)
    return out


@sample(([[1, 2], [3, -1, 4], []],), ([],))
def continue_outer_from_for_else(rows):
    out = []
    for row in rows:
        for v in row:
            if v < 0:
                break
        else:
            out.append(sum(row))
            continue
        out.append("neg")
    return out


@sample((6,), (0,))
def continue_outer_from_while_else(n):
    out = []
    i = 0
    while i < n:
        i += 1
        j = 0
        while j < i:
            j += 1
            if j == 3:
                break
        else:
            continue
        out.append(i)
    return out


@sample(([[1, 2], [0, 5], [7]],), ([],))
def continue_outer_from_inner_body(rows):
    out = []
    for row in rows:
        for v in row:
            if v == 0:
                break
            out.append(v)
        else:
            continue
        out.append("zero")
        if len(out) > 10:
            break
    return out


@sample(([[1, 2], [3, -1, 4], [5]],), ([],))
def break_flag_then_continue(rows):
    out = []
    for row in rows:
        bad = False
        for v in row:
            if v < 0:
                bad = True
                break
        if bad:
            continue
        out.append(sum(row))
    return out


@sample(([1, 2, 3], [0, 2]), ([], [1]))
def multi_clause_comprehensions(xs, ys):
    a = [x * y for x in xs for y in ys]
    b = [x for x in xs if x > 0 if x % 2]
    c = {x: y for x in xs if x for y in ys if y != x}
    d = [[y for y in range(x) if y] for x in xs if x < 5]
    e = {(x, y) for x in xs for y in ys if x < y}
    f = list(x + y for x in xs if x > 1 for y in ys if y)
    g = [x for x in xs if x > 0 and x < 3 or x == 0]
    return a, b, c, d, sorted(e), f, g


@sample(([1, -1, 3], [("a", 1), ("b", None)]), ([], []))
def comprehensions_side_by_side(args, pairs):
    return ", ".join([repr(a) for a in args if a != -1] + ["%s=%r" % (k, v) for k, v in pairs if v is not None])


@sample(([(1, None), (0, 2), (3, 0)],), ([],))
def comprehension_conditional_filter(rows):
    kept = [r for r in rows if (r[0] if r[1] is None else r[1])]
    flags = [a > 0 and b is None for a, b in rows]
    return kept, flags, any(a > 0 and b for a, b in rows), [a for a, b in rows if not (a or b)]


@sample(([".a", "b", ".c"], False), ([".a", "b"], True), ([], False))
def comprehension_filter_with_or(names, hidden):
    gen = list(x for x in names if hidden or not x.startswith("."))
    lst = [x.upper() for x in names if not hidden and x or x == ".c"]
    both = {x: len(x) for x in names if (hidden or x) and not x.endswith("a")}
    return gen, lst, both


@sample(([[1, 2], [3]], 2), ([], 0))
def comprehension_reads_outer_names(rows, k):
    scaled = [[v * k for v in row] for row in rows]
    pairs = [(i, v) for i, row in enumerate(rows) for v in row if v != k]
    return scaled, pairs, {k: len(rows) for _ in rows}


@sample((0,), (1,), (2,))
def return_inside_try_finally(x):
    log = []
    try:
        if x == 1:
            return "early", log
        log.append("body")
        if x == 2:
            return "late", log
    finally:
        log.append("fin")
    return "end", log


@sample(([0, 1, 2, 3, 4],), ([],))
def break_continue_in_try_finally(xs):
    log = []
    for x in xs:
        try:
            if x == 1:
                continue
            if x == 3:
                break
            log.append(x)
        finally:
            log.append("f")
    return log


@sample((5,), (0,))
def nested_try_finally(x):
    log = []
    try:
        try:
            log.append(10 // x)
        finally:
            log.append("inner")
    except ZeroDivisionError:
        log.append("zd")
    finally:
        log.append("outer")
    return log


@sample((1,), (0,), (2,))
def with_inside_try(x):
    rec = Recorder()
    try:
        with rec:
            rec.events.append(1 // x)
            if x == 2:
                return rec.events
        rec.events.append("after")
    except ZeroDivisionError:
        rec.events.append("zd")
    return rec.events


@sample(([0, 1, 2, 3],), ([5],))
def break_in_with_in_try_finally(xs):
    rec = Recorder()
    for x in xs:
        try:
            with rec:
                if x == 2:
                    break
                rec.events.append(x)
        finally:
            rec.events.append("f")
    return rec.events


@sample(([0, 1, 2, 3, 4],), ([],))
def break_continue_in_with(xs):
    rec = Recorder()
    for x in xs:
        with rec:
            if x == 1:
                continue
            if x == 3:
                break
            rec.events.append(x)
        rec.events.append("after")
    rec.events.append("end")
    return rec.events


@sample((0,), (2,), (5,))
def while_with_return_in_with(n):
    rec = Recorder()
    with rec:
        i = 0
        while i < n:
            i += 1
            if i == 3:
                return rec.events, "returned"
            rec.events.append(i)
    return rec.events, i


@sample((1,), (0,))
def finally_changes_what_return_reads(x):
    log = [0]
    try:
        if x:
            return len(log)
    finally:
        log.append(1)
    return len(log) * 10


@sample((3,), (0,))
def try_finally_in_while(n):
    log = []
    while n:
        try:
            n -= 1
            if n == 1:
                continue
            log.append(n)
        finally:
            log.append("f")
    return log


@sample((["a", "bb", "ccc"],), (["", "x"],))
def chained_comparison_calls_once(parts):
    calls = []

    def size(p):
        calls.append(p)
        return len(p)

    first = 1 <= size(parts[0]) <= 2
    each = [1 <= size(p) <= 2 for p in parts]
    for p in parts:
        last = 0 < size(p) < 3 < len(calls)
    return first, each, all(1 <= size(p) <= 2 for p in parts), last, calls


@sample((["ab=", "", "a=b=c", "=="],), ([],))
def continue_inner_while_inside_for(lines):
    decoded = ""
    for line in lines:
        if not line:
            decoded += "E"
            continue
        i, n = 0, len(line)
        while i < n:
            c = line[i]
            if c != "=":
                decoded += c
                i += 1
            elif i + 1 == n:
                i += 1
                continue
            else:
                decoded += "<>"
                i += 1
            if i == n:
                decoded += "N"
    return decoded


@sample(({1: [2], 2: [3], 3: [1]},), ({1: [2], 2: []},), ({1: [2, 3], 2: [], 3: [4], 4: [1]},), ({},),
        ({1: [], 2: [1], 3: [2, 3]},))
def continue_two_loops_out(successors):
    """graphlib.TopologicalSorter._find_cycle: `while ...: else: break` inside `while True` inside
    `for`, which CPython turns into a jump to the `for`."""
    stack, itstack, seen, node2stacki = [], [], set(), {}
    for node in successors:
        if node in seen:
            continue
        while True:
            if node in seen:
                if node in node2stacki:
                    return stack[node2stacki[node]:] + [node]
            else:
                seen.add(node)
                itstack.append(iter(successors[node]).__next__)
                node2stacki[node] = len(stack)
                stack.append(node)
            while stack:
                try:
                    node = itstack[-1]()
                    break
                except StopIteration:
                    del node2stacki[stack.pop()]
                    itstack.pop()
            else:
                break
    return None


@sample(([[[1, 2], [3]], [[4, -1], [5]], [[6]]],), ([],))
def continue_three_loops_out(grid):
    out = []
    for plane in grid:
        for row in plane:
            i = 0
            while i < len(row):
                if row[i] < 0:
                    break
                i += 1
            else:
                out.append(row)
                continue
            out.append("neg")
            break
        else:
            out.append("plane done")
    return out


# finally bodies whose end CPython copies onto each branch (the RERAISE, short tails before it)
@sample((1, True), (0, True), (2, False), (0, False))
def finally_with_branch(x, flag):
    log = []
    try:
        try:
            log.append(10 // x)
        finally:
            if flag:
                log.append("cleanup")
    except ZeroDivisionError:
        log.append("raised")
    return log


@sample((1, True, 0), (0, True, 2), (2, False, 0), (0, True, 0), (1, True, 5))
def finally_skips_on_condition(x, a, b):
    log = []
    try:
        try:
            log.append(10 // x)
        finally:
            if a and not (b and x):
                try:
                    log.append(10 // b)
                except ZeroDivisionError:
                    log.append("zd")
    except ZeroDivisionError:
        log.append("raised")
    return log


@sample((1, False, 0), (0, False, 0), (1, True, 0), (0, True, 1), (1, False, 2))
def finally_tail_copied_onto_branches(x, backup, fail):
    log = []
    try:
        try:
            log.append(10 // x)
        finally:
            try:
                if fail == 1:
                    raise OSError("close")
            finally:
                if log and not backup:
                    try:
                        log.append(10 // fail)
                    except ZeroDivisionError:
                        pass
                log.append("end")
    except (OSError, ZeroDivisionError) as e:
        log.append(type(e).__name__)
    return log


@sample((None,), (2,), (0,), ("a",))
def finally_with_bare_except(x):
    log = []
    if x is None:
        return log
    try:
        try:
            log.append(10 // x)
        finally:
            try:
                log.append(int(x) + 1)
            except:  # noqa: E722 - the shape under test
                log.append("bad")
    except ZeroDivisionError:
        log.append("zd")
    return log


@sample(([1, 2, "a", 5],), ([],))
def finally_with_branch_in_loop(items):
    log = []
    for item in items:
        try:
            value = 10 // item
        except TypeError:
            log.append("skip")
            continue
        try:
            if value > 3:
                log.append(value)
            else:
                log.append(-value)
        finally:
            if item != 1:
                log.append("f")
    return log


@sample((1, True), (0, True), (1, False), (0, False))
def return_through_finally_with_branch(x, close):
    log = []
    try:
        if x:
            log.append("x")
            return log
        log.append("not x")
        return log[:]
    finally:
        if close:
            log.append("closed")


@sample(([Box(1), Box(2)], [Box(3)]), ([], [Box(0)]))
def loops_in_nested_finally_bodies(xs, ys):
    log = []
    try:
        try:
            for a in xs:
                a.v += 10
        finally:
            for a in xs:
                log.append(a.v)
        try:
            for b in ys:
                log.append(10 // b.v)
        finally:
            for b in ys:
                b.v = -1
    except ZeroDivisionError:
        log.append("zd")
    finally:
        log.append(len(ys))
    return log, [b.v for b in ys]


@sample(([1, 0, 2, None, 5],), ([3],), ([0, 0],))
def try_around_while_true(xs):
    log = []
    try:
        while True:
            x = xs.pop()
            if x == 0:
                log.append("zero")
                continue
            if x is None:
                break
            log.append(10 // (x - 3))
        log.append("after")
    finally:
        log.append(len(xs))
    return log


@sample(("a\\bc\\d", 0), ("abc", 5), ("", 0), ("\\\\", 1))
def break_from_while_with_chained_test(text, i):
    res = []
    n = len(text)
    while 0 <= i < n:
        k = text.find("\\", i)
        if k < 0:
            res.append(text[i:])
            break
        res.append(text[i:k])
        i = k + 2
    return res, i


@sample(([b"ab", b"c", b""], True), ([b""], False))
def generator_try_around_while_true(chunks, close):
    log = []

    def pieces():
        try:
            while True:
                yield from log
                data = chunks.pop(0)
                if not data:
                    break
                log.append(data)
            yield "end"
        finally:
            if close:
                log.append("closed")

    return list(pieces()), log


# `return <constant>` in a try body: CPython leaves it out of the exception-table range
@sample((Box(1),), (Box(-1),), (5,))
def constant_return_in_try(node):
    try:
        if node.v is None or node.v < 0:
            return None
        x = node.v + 1
    except AttributeError:
        return "no v"
    return x


@sample(("ABC",), (b"DEF",), (b"\xff",), (3,))
def raise_in_except_after_branch(c):
    try:
        if isinstance(c, str):
            c.encode("ascii")
        else:
            c = str(c, "ascii")
    except UnicodeError:
        raise ValueError(c) from None
    return c.lower()


@sample(({1: 2}, 1), ({1: 2}, 3), ({1: {}}, 1), ({}, []))
def return_none_from_branch_in_try(table, key):
    try:
        if key in table:
            if table[key] != 2:
                raise ValueError(key)
            return
    except TypeError:
        return "unhashable"
    table[key] = 0
    return table


@sample((["a", ".b", ".c", "x", ".d"],), ([],))
def continue_in_with_in_try(keys):
    """mimetypes.MimeTypes._read_windows_registry: 3.12+ put the jump after the inlined __exit__
    call in a block of its own."""
    rec = Recorder()
    for k in keys:
        try:
            with rec:
                if not k.startswith("."):
                    continue
                if k == ".c":
                    raise OSError(k)
                rec.events.append(k)
        except OSError:
            rec.events.append("oserror")
            continue
    return rec.events


@sample((["", "Hb", "x", "Ha"],), (["", 3, "Ha"],), ([""],), ([],))
def while_walrus_in_try_returns_none(lines):
    """http.cookiejar's _really_load: the loop's two tests each leave to their own copy of the
    final `return None`, outside the try."""
    out = []
    try:
        while (line := lines.pop()) != "":
            if not line.startswith("H"):
                continue
            out.append(line)
    except IndexError:
        raise
    except Exception:  # noqa: BLE001 - the shape under test
        raise ValueError(out) from None


@sample(({1: "one"}, {"a": 1, "b": 2}, 1), ({}, {"a": 1, "b": 2}, 2), ({}, {"a": 1}, [3]), ({}, {"a": [3]}, [3]))
def for_else_in_except_clause(table, members, value):
    """enum's _proto_member.__set_name__: the loop's `else` raises, so nothing post-dominates it and
    its `break` runs a statement first."""
    log, member = [], None
    try:
        try:
            member = table[value]
        except (KeyError, TypeError):
            for name, canonical in members.items():
                if canonical == value:
                    member = name
                    break
            else:
                raise LookupError(value)
    except LookupError:
        log.append("new")
    log.append(member)
    return log


@sample(*[(x,) for x in range(9)])
def for_else_that_raises_before_a_try(x):
    """flowgen seed 675: nothing post-dominates the `if` that raises in the second loop's `else`,
    so its other arm must still stop where the loop goes on (the try), not walk on through it."""
    rec = Recorder()
    if x > 1:
        with rec:
            for i in range(x % 4 + 1):
                x = (x + i) % 9
                if x % 3 == 2:
                    return rec.events, 5
            for i in range(x % 4 + 1):
                x = (x + i) % 9
                if x % 2 == 1:
                    break
            else:
                if x % 4 == 1:
                    raise KeyError(13)
                x = (x * 3 + 14) % 7
            try:
                x = (x * 3 + 16) % 7
            except ValueError:
                rec.events.append(18)
    return rec.events, x


@sample(([1, 1, 2, 3], True), ([1], True), ([2], False), ([0, "x"], True))
def loop_with_break_ends_try_finally(cookies, advertise):
    """http.cookiejar.CookieJar.add_cookie_header: the loop's break and its running out both reach
    the inline finally copy, which ends the try body here (no break through the finally)."""
    log = ["lock"]
    try:
        if advertise and len(cookies) > 1:
            for cookie in cookies:
                if cookie != 1:
                    log.append(10 // cookie)
                    break
    finally:
        log.append("unlock")
    log.append("clear")
    return log


@sample((True, False), (False, False), (False, True), (None, True))
def return_inside_try_inside_withs(fast_ok, fail_copy):
    """shutil.copyfile: a try whose body ends in a `return` through two with-blocks."""
    rec, log = Recorder(), []

    def fast():
        if not fast_ok:
            raise LookupError
        log.append("fast")

    with rec:
        try:
            with rec:
                if fast_ok is not None:
                    try:
                        fast()
                        return rec.events, log
                    except LookupError:
                        pass
                log.append("copy")
                if fail_copy:
                    raise IsADirectoryError
        except IsADirectoryError:
            log.append("dir")
    return rec.events, log


@sample(("3",), ("2.5",), ("a b",), (None,))
def return_from_nested_except_clauses(val):
    """random.main: each except clause returns; the innermost return leaves both clauses."""
    try:
        val = int(val)
        return val + 1
    except ValueError:
        try:
            val = float(val)
            return val * 2
        except ValueError:
            return val.split()
    except TypeError:
        return "none"


@sample((2, True), (0, True), (0, False), ("a", True))
def return_none_from_except_clause_in_try(x, ignore):
    """tempfile.TemporaryDirectory._rmtree's onexc: a bare `return` in an inner except clause is
    left out of the outer try's exception-table range."""
    log = []
    try:
        try:
            log.append(10 // x)
        except ZeroDivisionError:
            if ignore:
                return
            raise
        log.append("after")
    except TypeError:
        log.append("type")
    return log


class _Helpful:
    def __init__(self):
        self.out = []

    def help_a(self):
        self.out.append("help a")

    def do_b(self):
        """doc of b"""

    def do_c(self):
        pass


@sample(("a",), ("b",), ("c",), ("d",), ("",))
def return_from_try_inside_except_clause(arg):
    """cmd.Cmd.do_help's shape: the `return` leaves a try nested in an except clause."""
    self = _Helpful()
    if arg:
        try:
            func = getattr(self, "help_" + arg)
        except AttributeError:
            try:
                doc = getattr(self, "do_" + arg).__doc__
                if doc:
                    self.out.append(doc)
                    return self.out
            except AttributeError:
                pass
            self.out.append("no help")
            return None
        func()
    else:
        self.out.append("names")
    return self.out


@sample(([1], {1: "a$", 2: "b"}, "xy"), ([1, 2], {2: "b"}, "x"), ([1, 2, 3], {}, "x"), ([9], {}, "x"), ([], {}, ""))
def elif_chain_in_try_in_loop(path, table, rest):
    accum = []
    while rest:
        rest = rest[1:]
        try:
            if len(path) == 1:
                v = table[path[0]]
            elif len(path) == 2:
                v = table[path[1]]
            else:
                raise ValueError(rest)
        except KeyError:
            raise TypeError(path) from None
        if "$" in v:
            accum.append(v)
        else:
            accum.append(0)
    return accum


# ---------------------------------------------------------------------------------------------
# order of evaluation and other traps
@sample((1,), (2,))
def exit_changes_value(x):
    rec = Recorder()
    with rec:
        n = len(rec.events) + x
    return n, len(rec.events)


@sample((0,), (1,), (2,))
def finally_with_return(x):
    log = []
    try:
        if x == 0:
            return log
        log.append(1 / (x - 1))
    except ZeroDivisionError:
        log.append("zero")
    finally:
        log.append("done")
    return log


@sample(([1, 0, 2, "a", 3],), ([],))
def try_in_loop(xs):
    out = []
    for x in xs:
        try:
            if x == 2:
                continue
            out.append(10 // x)
        except ZeroDivisionError:
            out.append("z")
        except TypeError:
            break
    return out


@sample((3,), (0,))
def nested_try(x):
    try:
        try:
            v = 6 // x
        except ZeroDivisionError:
            v = int("bad")
    except ValueError as e:
        v = str(e)[:7]
    return v


@sample(([5, 3, 0, 9],))
def walrus_in_while(xs):
    it = iter(xs)
    seen = []
    while (v := next(it, None)) is not None and v:
        seen.append(v)
    return seen, v


def _side(log, tag, value):
    log.append(tag)
    return value


@sample((1,), (0,))
def evaluation_order(x):
    log = []
    r = _side(log, "a", x) + _side(log, "b", 2) * _side(log, "c", 3)
    d = {_side(log, "k", "k"): _side(log, "v", x)}
    _side(log, "t", [0])[_side(log, "i", 0)] = _side(log, "val", 1)
    return r, d, log


@sample((1,), (0,))
def swapped_pending_calls(x):
    log = []
    a, b = _side(log, "a", x), _side(log, "b", 2)
    c, d, e = _side(log, "c", 3), _side(log, "d", a), _side(log, "e", b)
    return a, b, c, d, e, log


@sample((1, 2, 3), (4, 5, 6))
def positional_only(a, b, /, c):
    return a - b + c


@sample(([[1, 2], [3]],), ([],))
def nested_comprehension(rows):
    flat = [v for row in rows for v in row]
    table = {i: [v * i for v in row if v > 1] for i, row in enumerate(rows)}
    return flat, table, sum(v for row in rows for v in row if v % 2)


@sample((2,), (3,))
def closure_in_comprehension(n):
    fns = [lambda v, k=k: v * k for k in range(n)]
    return [f(10) for f in fns]


@sample(("abc", 3), ("", 0))
def nested_fstring(s, width):
    return f"[{s:>{width}}] {s!r:^{width + 4}} {width:#x} {len(s)!s}"


@sample(((1, 2, 3, 4),), ((1,),))
def star_unpacking(t):
    try:
        a, *mid, z = t
    except ValueError:
        return "short"
    *init, last = t
    return a, mid, z, init, last


@sample((5,), (12,))
def multiple_targets(x):
    a = b = x * 2
    c = [0, 0]
    c[0] = c[1] = a + 1
    return a, b, c


@sample((3,), (-3,))
def conditional_expression_in_call(x):
    return abs(x) if x < 0 else max(x, 1), [x] if x else []


@sample((0,), (1,), (2,))
def elif_chain(x):
    if x == 0:
        return "zero"
    elif x == 1:
        r = "one"
    else:
        r = "many"
    return r.upper()


@sample((4,), (0,))
def loop_else_return(n):
    for i in range(n):
        if i == 10:
            break
    else:
        return "no break"
    return "break"


@sample(([1, "x", 0, 4],), ([],))
def try_at_loop_start(items):
    total, i = 0, 0
    while True:
        try:
            total += 10 // items[i]
        except IndexError:
            break
        except (TypeError, ZeroDivisionError):
            total -= 1
        i += 1
    return total


@sample((3,), (0,), (10,))
def generator(n):
    """Results are compared by driving the generator (next, then send) to its return value."""
    while n > 0:
        got = yield n
        n -= 1 if got is None else got
    return "done"


@sample(("a/b.txt",), ("c",))
def imports(path):
    import os
    import os.path as osp
    from collections import OrderedDict as OD, deque
    from json import dumps

    return os.sep, osp.basename(path), list(OD(a=1)), deque([1]).pop(), dumps(path)


class Base:
    def describe(self, suffix=""):
        return "base" + suffix


class Derived(Base):
    def describe(self, suffix=""):
        return "derived" + suffix


@sample((Derived(),), (Base(),))
def explicit_super(obj):
    try:
        return super(Derived, obj).describe("!"), obj.describe()
    except TypeError as exc:
        return "not derived", type(exc).__name__


class ZeroArgSuper(Derived):
    def describe(self, suffix=""):
        return "zero:" + super().describe(suffix), __class__.__name__


SAMPLES.append(Sample(ZeroArgSuper.describe, [(ZeroArgSuper(),), (ZeroArgSuper(), "?")]))


class _Ctx:
    def __init__(self, log, tag):
        self.log, self.tag = log, tag

    def __enter__(self):
        self.log.append("in " + self.tag)
        return self.tag

    def __exit__(self, kind, value, tb):
        self.log.append("out " + self.tag)
        return kind is KeyError  # swallow KeyError only


@sample((0,), (1,), (2,))
def multiple_with_items(mode):
    log = []
    with _Ctx(log, "a") as a, _Ctx(log, "b") as b:
        log.append(a + b)
        if mode == 1:
            raise KeyError("swallowed")
        if mode == 2:
            log.append({}.get("k", "default"))
    return log


@sample((3,), (0,))
def raise_from(x):
    try:
        try:
            return 1 / x
        except ZeroDivisionError as exc:
            raise ValueError("bad x") from exc
    except ValueError as err:
        return type(err.__cause__).__name__, str(err)


@sample(([1, 2, 3, 4, 5, 6],))
def slice_assignment(xs):
    ys = list(xs)
    ys[1:3] = ["a", "b", "c"]
    del ys[::2]
    ys[-1:] = []
    return ys, xs[1:-1:2], "%s-%d" % ("p", len(ys))


@sample(({"a": 1}, {"b": 2}), ({}, {"a": 3}))
def merged_kwargs(first, second):
    def collect(**kw):
        return sorted(kw.items())

    return collect(**first, **second), collect(z=0, **first)


@sample((5,), (1,))
def nonlocal_in_loop(n):
    total = 0

    def add(v):
        nonlocal total
        total += v

    for i in range(n):
        if i % 2:
            add(i)
    return total


@sample((["abcd", "abxy", "ab"],), (["x"],), ([],))
def break_as_last_statement(words):
    prefix = None
    for word in words:
        if prefix is None:
            prefix = word
        else:
            for i, (a, b) in enumerate(zip(prefix, word)):
                if a != b:
                    prefix = prefix[:i]
                    break
    return prefix


@sample(([3, -1, 4],), ([],))
def enumerate_unpack_else(xs):
    for i, (v, sq) in enumerate((x, x * x) for x in xs):
        if v < 0:
            return i, sq
    else:
        return None


@sample(("a", None), (None, "b"), (None, None))
def none_checks(a, b):
    if a is None and b is None:
        return "both"
    return a if a is not None else b


@sample((Box(1),))
def chained_mutable_assignment(box):
    """One list bound to two targets must stay one list (optparse's `self.largs = largs = []`)."""
    box.items = items = []
    a = b = {}
    items.append(1)
    a["k"] = 2
    return box.items, b


def _delegate_to(n):
    got = yield n
    return n, got


@sample((2,), (0,))
def yield_from(n):
    results = []
    for i in range(n):
        result = yield from _delegate_to(i)
        results.append(result)
    try:
        yield from _delegate_to(len(results))
        yield from [1, 2][:n]
    except AttributeError:  # a list iterator cannot take send()
        results.append("no send")
    return results


def _register(cls):
    cls.registered = True
    return cls


@sample((2, Base), (5, object))
def class_statement(n, base):
    class Local(base):
        """A class made inside a function: body, closure, methods, super(), decorator."""

        scale = n
        doubled = [scale * 2 for _ in range(2)] if n > 3 else None  # noqa: F821 - class names are not visible in a comprehension: n > 3 raises NameError, on purpose

        def __init__(self, v=1):
            self.v = v * n

        def describe(self, suffix=""):
            try:
                return super().describe(suffix) + "/local"
            except AttributeError:
                return "no describe"

        @staticmethod
        def twice(x):
            return 2 * x

        @property
        def double(self):
            return self.v * 2

    @_register
    class Other(Local, metaclass=type):
        pass

    obj = Other(3)
    return obj.v, obj.double, Local.twice(4), obj.describe("!"), Other.registered, Local.scale, Local.__doc__, \
        Local.__qualname__, Local.doubled


@sample(("user@host:80", (1, 2, 3)), ("host", (4, 5, 6)))
def unpack_discards(netloc, triple):
    """3.13 compiles the first `_` store (overwritten at once) as POP_TOP (urllib.parse._hostinfo)."""
    _, _, hostinfo = netloc.rpartition("@")
    first, _, _ = triple
    _, *_, last = triple
    return hostinfo, first, last, _


@sample(([3, 4],), ([],), ([0],))
def for_that_never_loops(xs):
    """Its body always leaves, so there is no back edge (configparser's popitem)."""
    for x in xs:
        if x:
            return x * 2
        raise ValueError("zero")
    return "empty"


class _Step:
    """An awaitable that yields once to whoever drives the coroutine."""

    def __init__(self, v):
        self.v = v

    def __await__(self):
        yield ("step", self.v)
        return self.v * 2


class _AsyncCtx:
    def __init__(self, log, tag):
        self.log, self.tag = log, tag

    async def __aenter__(self):
        self.log.append("in " + self.tag)
        return self.tag

    async def __aexit__(self, kind, value, tb):
        self.log.append("out " + self.tag)
        return kind is KeyError  # swallow KeyError only


async def _arange(n):
    for i in range(n):
        await _Step(-i)
        yield i


@sample((3,), (0,), (7,))
async def async_function(n):
    log = []
    async with _AsyncCtx(log, "a") as tag:
        log.append((tag, await _Step(n)))
    async for v in _arange(n):
        if v == 5:
            break
        log.append(v)
    else:
        log.append("exhausted")
    values = [v * 2 async for v in _arange(n) if v]
    doubled = {v: await _Step(v) for v in range(n)}
    async with _AsyncCtx(log, "b"):
        if n:
            raise KeyError("swallowed")
    try:
        async with _AsyncCtx(log, "c"):
            return log, values, doubled, await _Step(1 / n)
    except ZeroDivisionError:
        return log, "no n"


@sample((3,), (0,))
async def async_generator(n):
    async for v in _arange(n):
        got = yield v
        await _Step(-1 if got is None else got)
    pending = (v * 3 async for v in _arange(n))
    yield [v async for v in pending]


@sample((3,), ("x",))
def long_displays(a):
    """More than ~16 items: built empty, then one MAP_ADD / SET_ADD / LIST_APPEND per item."""
    d = {"k0": a, "k1": a, "k2": a, "k3": a, "k4": a, "k5": a, "k6": a, "k7": a, "k8": a, "k9": a,
         "k10": a, "k11": a, "k12": a, "k13": a, "k14": a, "k15": a, "k16": a, "k17": a, "k18": a, "k19": [a]}
    s = {a * 1, a * 2, a * 3, a * 4, a * 5, a * 6, a * 7, a * 8, a * 9, a * 10, a * 11, a * 12, a * 13,
         a * 14, a * 15, a * 16, a * 17, a * 18, a * 19, a * 20, a * 21, a * 22, a * 23, a * 24, a * 25,
         a * 26, a * 27, a * 28, a * 29, a * 30, a * 31, a * 32, a * 33}
    xs = [a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a]
    return d, sorted(map(str, s)), xs


@sample((["ab", 3, None, ""], True), (["x"], False))
def boolean_ops_on_calls(items, strict):
    """3.12+ keeps a copy of `f()` for `f() or g()` and pops it on the `g()` side (was a refusal in lambdas)."""
    keep = lambda v: hasattr(v, "upper") or (strict and isinstance(v, int))  # noqa: E731
    return [keep(v) for v in items], [len(str(v)) and str(v) or repr(v) for v in items]


@sample((0,), (3,))
def negative_constants(n):
    """The folded constant -1 must keep its brackets: `(-1) ** n` is not `-1 ** n` (_pydecimal's __int__)."""
    return (-1) ** n, (-2.5) ** 2, (-1).__abs__(), (-1) ** -n, -(-1) ** n


@sample((0,), (1,))
def code_after_with_stays_after(mode):
    """`return f()` after a with-block runs after __exit__ (3.10 used to move it inside)."""
    log = []
    with _Ctx(log, "a") as tag:
        if mode:
            return log, tag
    return log.append("after") or log


@sample((0,), (1,))
async def async_with_returns(mode):
    log = []
    async with _AsyncCtx(log, "a") as tag, _AsyncCtx(log, "b"):
        if mode:
            return log, await _Step(len(tag))
    return log


@sample(([1, 2],), ([],), ([-1],))
def loop_in_try_then_raise(xs):
    """Code after the try must stay after it (logging's StrFormatStyle.validate: it moved inside)."""
    seen = set()
    try:
        for x in xs:
            if x < 0:
                raise ValueError("negative")
            seen.add(x)
    except ValueError as e:
        raise ValueError("wrapped: %s" % e)
    if not seen:
        raise ValueError("empty")
    return sorted(seen)


@sample((b"ab", b"ab"), (b"ab", b"ac"), (b"", b""))
def returns_from_loop_in_with(a, b):
    """filecmp._do_cmp's shape: the returns must stay returns (not breaks) through both __exit__s."""
    log = []
    with _Ctx(log, "a"), _Ctx(log, "b"):
        i = 0
        while True:
            x, y = a[i:i + 1], b[i:i + 1]
            if x != y:
                return False, log
            if not x:
                return True, log
            i += 1


@sample(([1, 5, 3],), ([2],))
def cell_variable_in_comprehension(xs):
    """3.13 keeps plain values in a cell's slot while an inlined comprehension runs (functools._c3_mro)."""
    greater = []
    for base in xs:
        greater.append(any(b > base for b in xs))
    return [base * 2 for base in xs], greater, base


WALRUS_GLOBAL = None


@sample((lambda: 0,), (lambda: 7,))
def walrus_on_a_global(make):
    """A walrus binding nothing here reads still binds the global (it used to be dropped)."""
    global WALRUS_GLOBAL
    if WALRUS_GLOBAL := make():
        return "set", _walrus_global()
    return "unset", _walrus_global()


def _walrus_global():
    return WALRUS_GLOBAL


def _names(annotations: dict) -> dict:
    return {k: getattr(v, "__name__", v) for k, v in annotations.items()}


@sample((2,), (5,))
def annotations_kept(n):
    """Class-body annotations (a dataclass made in a function) and a nested def's annotations."""
    import dataclasses

    @dataclasses.dataclass
    class Point:
        x: int
        y: "int" = n
        if n > 3:
            big: bool = True

    def scale(p: Point, k: "float" = 2, *rest: int, **named) -> Point:
        return Point(p.x * k, p.y * k)

    return repr(scale(Point(1))), _names(scale.__annotations__), _names(Point.__annotations__)


_EXCEPT_STAR_SAMPLES = '''
@sample((0,), (1,), (2,), (3,), (4,))
def except_star(kind):
    log = []

    def fail():
        if kind == 3:
            raise ValueError("plain")
        if kind < 3:
            raise ExceptionGroup("g", [ValueError("v"), TypeError("t"), KeyError("k")][:kind + 1])

    try:
        try:
            fail()
        except* ValueError as group:
            log.append(("value", len(group.exceptions)))
        except* TypeError:
            log.append("type")
        else:
            log.append("none")
        finally:
            log.append("finally")
    except* KeyError as rest:
        log.append(("left", [type(e).__name__ for e in rest.exceptions]))
    return log
'''
if sys.version_info >= (3, 11):  # `except*` does not parse before 3.11
    exec(compile(_EXCEPT_STAR_SAMPLES, __file__, "exec"), globals())


# ---------------------------------------------------------------------------------------------
class _TookTooLong(Exception):
    pass


def _outcome(func: Callable, args: tuple, kwargs: dict):
    """("ok", result) or ("raised", type, message); a recreated function that loops is stopped."""
    alarm = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if alarm:
        previous = signal.signal(signal.SIGALRM, _raise_too_long)
        signal.setitimer(signal.ITIMER_REAL, CALL_TIMEOUT_S)
    try:
        return ("ok", func(*args, **kwargs))
    except _TookTooLong:
        return ("timeout", CALL_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - we compare what each version raises
        return ("raised", type(exc).__name__, str(exc))
    finally:
        if alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


def _raise_too_long(signum, frame):
    raise _TookTooLong


def _drive(gen) -> list:
    """Every value a generator yields when sent None and 2 in turn, then what it returns."""
    seen = []
    try:
        value = next(gen)
        while len(seen) < 1000:
            seen.append(value)
            value = gen.send(None if len(seen) % 2 else 2)
    except StopIteration as stop:
        seen.append(("returned", stop.value))
    except Exception as exc:  # noqa: BLE001 - what the generator raises is part of its behaviour
        seen.append(("raised", type(exc).__name__, str(exc)))
    return seen


def _run_coroutine(coro) -> tuple:
    """What a coroutine yields to its driver (sent None each time), then its outcome."""
    trace: list = []
    try:
        while len(trace) < 1000:
            trace.append(coro.send(None))
        return trace, ("running",)
    except StopIteration as stop:
        return trace, ("returned", _normalise(stop.value))
    except Exception as exc:  # noqa: BLE001 - part of its behaviour
        return trace, ("raised", type(exc).__name__, str(exc))


def _drive_async(agen) -> list:
    """Each step of an async generator (sent None, then 2 in turn): what it awaited and yielded."""
    seen = []
    while len(seen) < 100:
        step = agen.asend(None if len(seen) % 2 else 2) if seen else agen.__anext__()
        trace, outcome = _run_coroutine(step)
        seen.append((trace, outcome))
        if outcome[0] != "returned":
            break
    return seen


def _normalise(value: Any) -> Any:
    if inspect.isgenerator(value):
        return _drive(value)
    if inspect.iscoroutine(value):
        return _run_coroutine(value)
    if inspect.isasyncgen(value):
        return _drive_async(value)
    if isinstance(value, Box):
        return ("Box", value.v)
    if isinstance(value, (list, tuple)):
        return type(value)(_normalise(v) for v in value)
    return value


def _split(inputs) -> tuple[tuple, dict]:
    if len(inputs) == 2 and isinstance(inputs[0], tuple) and isinstance(inputs[1], dict):
        return inputs
    return inputs, {}


@dataclass
class ProbeResult:
    name: str
    passed: bool
    detail: str
    source: str


def rebuild(func: Callable, source: str) -> Callable:
    namespace = dict(func.__globals__)
    exec(compile(source, f"<decompiled {func.__name__}>", "exec"), namespace)
    if f"__closure_{func.__name__}" in namespace:  # free variables come in as the wrapper's arguments
        return namespace[f"__closure_{func.__name__}"](*(cell.cell_contents for cell in func.__closure__))
    return namespace[func.__name__]


def check(s: Sample) -> ProbeResult:
    name = s.func.__name__
    source, ok = decompile_or_dis(s.func)
    if not ok:
        return ProbeResult(name, False, source.splitlines()[1].removeprefix("# reason: "), source)
    try:
        recreated = rebuild(s.func, source)
    except Exception as exc:  # noqa: BLE001
        return ProbeResult(name, False, f"exec failed: {exc}", source)
    for inputs in s.inputs:
        args, kwargs = _split(inputs)
        expected = _normalise(_outcome(s.func, copy.deepcopy(args), copy.deepcopy(kwargs)))
        got = _normalise(_outcome(recreated, copy.deepcopy(args), copy.deepcopy(kwargs)))
        if expected != got:
            return ProbeResult(name, False, f"{inputs!r}: expected {expected!r}, got {got!r}", source)
    return ProbeResult(name, True, f"{len(s.inputs)} inputs", source)


def run(verbose: bool = False) -> list[ProbeResult]:
    results = [check(s) for s in SAMPLES]
    width = max(len(r.name) for r in results)
    print(f"{'function':<{width}}  {'result':<6}  detail")
    print(f"{'-' * width}  {'-' * 6}  {'-' * 6}")
    for r in results:
        print(f"{r.name:<{width}}  {'PASS' if r.passed else 'FAIL':<6}  {r.detail[:100]}")
        if verbose or (not r.passed and "--quiet" not in sys.argv):
            print("    " + r.source.replace("\n", "\n    ").rstrip())
    passed = sum(r.passed for r in results)
    print(f"decompiler probe: {passed}/{len(results)} passed (python {sys.version_info.major}.{sys.version_info.minor})")
    return results


if __name__ == "__main__":
    run(verbose="-v" in sys.argv)
