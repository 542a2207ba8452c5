"""Shim: nelssa.experiments.test_time (how long `make test` takes on a fresh clone)."""

import sys

from nelssa.experiments.test_time import main

if __name__ == "__main__":
    sys.exit(main())
