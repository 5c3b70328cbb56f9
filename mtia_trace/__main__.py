"""`python -m mtia_trace`: the same command line as `mtia-trace`."""

from mtia_trace.cli import main

if __name__ == "__main__":
    main()
