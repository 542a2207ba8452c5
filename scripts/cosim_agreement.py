"""The serving emulator's step cost against the co-simulation's: docs/results/cosim_agreement.md.

A shim: the options, the defaults and the code are in nelssa/experiments/cosim_agreement.py."""

import sys

from nelssa.experiments.cosim_agreement import main

if __name__ == "__main__":
    sys.exit(main())
