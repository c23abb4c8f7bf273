"""The toy example from the Dynamo "explain" proposal (seed 004): a data-dependent branch.

Run it under dynascope to see the three frames Dynamo makes of it:

    dynascope explain examples/toy_example.py
"""

import torch


def toy_example(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


def main() -> None:
    torch.manual_seed(0)
    opt_toy_example = torch.compile(toy_example, backend="eager")
    for _ in range(100):  # random inputs, so both sides of the `if` run
        opt_toy_example(torch.randn(10), torch.randn(10))


if __name__ == "__main__":
    main()
