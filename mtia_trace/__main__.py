"""`python -m mtia_trace`: the same command line as `mtia-trace`, with its exit code."""

import sys

from mtia_trace.cli import main

if __name__ == "__main__":
    sys.exit(main())
