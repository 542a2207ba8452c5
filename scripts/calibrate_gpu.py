"""GPU efficiency parameters fitted to measured torch kernel times: writes a hardware file.

A shim: the options, the defaults and the code are in nelssa/experiments/calibrate_gpu.py."""

import sys

from nelssa.experiments.calibrate_gpu import main

if __name__ == "__main__":
    sys.exit(main())
