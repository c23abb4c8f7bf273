"""A function Dynamo splits in three: a graph, a print it cannot trace, then a branch on a tensor.

    dynascope debug examples/stepping_example.py          # writes dynascope-debug/*.py and runs them
    dynascope debug --pdb examples/stepping_example.py    # the same, under pdb
"""

import torch


def normalize(a, b):
    x = a / (torch.abs(a) + 1)
    print("scaled")
    if b.sum() < 0:
        b = b * -1
    return x * b


if __name__ == "__main__":
    compiled = torch.compile(normalize, backend="eager")
    print(compiled(torch.full((3,), 2.0), -torch.ones(3)))
