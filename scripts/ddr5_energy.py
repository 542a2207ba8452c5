"""DDR5 energy per bit read from the controller's counted commands: docs/results/ddr5_energy.md,
and LoadStoreTrace replays with DRAMPower command traces.

A shim: the options, the defaults and the code are in nelssa/experiments/ddr5_energy.py."""

import sys

from nelssa.experiments.ddr5_energy import main

if __name__ == "__main__":
    sys.exit(main())
