"""`python -m dynascope.cli ...`: the same as `python -m dynascope ...` and the `dynascope` command."""

import sys

from dynascope.cli import main

if __name__ == "__main__":
    sys.exit(main())
