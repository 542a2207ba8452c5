"""Link faults end to end: decode steps over faulty RoCE and CXL links against a clean run.

A shim: the options, the defaults and the code are in nelssa/experiments/link_faults.py."""

import sys

from nelssa.experiments.link_faults import main

if __name__ == "__main__":
    sys.exit(main())
