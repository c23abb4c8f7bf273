"""`python -m dynascope ...`: the same as the `dynascope` command (torchrun -m dynascope run ... uses it)."""

import sys

from dynascope.cli import main

if __name__ == "__main__":
    sys.exit(main())
