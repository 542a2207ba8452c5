"""The planner's speed: docs/results/plan_bench.md.

A shim: the options, the defaults and the code are in nelssa/plan/bench.py."""

import sys

from nelssa.plan.bench import main

if __name__ == "__main__":
    sys.exit(main())
