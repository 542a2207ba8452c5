"""The fleet emulator's speed against the single-instance emulator: docs/results/fleet_scale.md.

A shim: the options, the defaults and the code are in nelssa/experiments/fleet_scale.py."""

import sys

from nelssa.experiments.fleet_scale import main

if __name__ == "__main__":
    sys.exit(main())
