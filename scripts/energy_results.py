"""docs/results/energy.md: GPU-only against NELSSA in joules per output token and average power
per tier on the conversation trace.

A shim: the options, the defaults and the code are in nelssa/experiments/energy_page.py."""

import sys

from nelssa.experiments.energy_page import main

if __name__ == "__main__":
    sys.exit(main())
