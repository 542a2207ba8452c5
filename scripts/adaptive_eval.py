"""The adaptive routing threshold against the static crossover: writes docs/results/adaptive.md.

A shim: the options, the defaults and the code are in nelssa/experiments/adaptive_eval.py."""

import sys

from nelssa.experiments.adaptive_eval import main

if __name__ == "__main__":
    sys.exit(main())
