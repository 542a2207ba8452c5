"""Soak of a PNM node: clients at a multiple of its sustainable rate; writes docs/results/soak.md.

A shim: the options, the defaults and the code are in nelssa/experiments/soak.py."""

import sys

from nelssa.experiments.soak import main

if __name__ == "__main__":
    sys.exit(main())
