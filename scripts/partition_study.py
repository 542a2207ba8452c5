"""Partitioning study (paper 5.3, Figure 7) on the RTL: writes docs/results/partitioning.md.

A shim: the options, the defaults and the code are in nelssa/experiments/partition_study.py."""

import sys

from nelssa.experiments.partition_study import main

if __name__ == "__main__":
    sys.exit(main())
