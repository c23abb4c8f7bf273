"""Two programs for `--compare-eager`: one where compiling clearly wins, one where it clearly loses.

    python scripts_payoff.py wins    # Dynamo folds a Python loop of constants away: each call is one multiply
    python scripts_payoff.py loses   # four prints split the function into five graphs: guards and resume calls
                                     # cost more than the few tiny ops they hold
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
    fn = torch.compile(folded if which == "wins" else split, backend="eager" if which == "wins" else "aot_eager")
    x = torch.randn(16)
    for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 40):
        fn(x)
