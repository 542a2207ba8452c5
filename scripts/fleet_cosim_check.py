"""K GPU decode nodes sharing one PNM node, co-simulated against the fleet emulator:
docs/results/fleet_cosim.md.

A shim: the options, the defaults and the code are in nelssa/experiments/fleet_cosim_check.py."""

import sys

from nelssa.experiments.fleet_cosim_check import main

if __name__ == "__main__":
    sys.exit(main())
