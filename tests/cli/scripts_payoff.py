"""Programs for `--compare-eager`: a function where compiling clearly wins, one where it clearly loses, or both.

    python scripts_payoff.py wins    # Dynamo folds a Python loop of constants away: each call is one multiply
    python scripts_payoff.py loses   # four prints split the function into five graphs: guards and resume calls
                                     # cost more than the few tiny ops they hold
    python scripts_payoff.py both    # the two, one after the other, in one program
"""

import io
import math
import sys

import torch

SINK = io.StringIO()


def folded(x):
    s = 0.0
    for i in range(1000):
        s += math.sin(i) * 0.001
    return x * s


def split(x):
    x = x + 1
    print("a", file=SINK)
    x = x * 2
    print("b", file=SINK)
    x = x - 1
    print("c", file=SINK)
    x = x / 2
    print("d", file=SINK)
    return x + 3


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "wins"
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    x = torch.randn(16)
    for name, compiled in (("wins", torch.compile(folded, backend="eager")),
                           ("loses", torch.compile(split, backend="aot_eager"))):  # fmt: skip
        if which in (name, "both"):
            for _ in range(calls):
                compiled(x)
