"""The fleet orchestrator against static placement: docs/results/orchestrator.md.

A shim: the options, the fleets and the code are in nelssa/experiments/orchestrator_eval.py."""

import sys

from nelssa.experiments.orchestrator_eval import main

if __name__ == "__main__":
    sys.exit(main())
