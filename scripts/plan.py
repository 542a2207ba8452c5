"""The cheapest fleet that meets the SLO, GPU-only against NELSSA: docs/results/plan.md.

A shim: the options, the defaults and the code are in nelssa/plan/page.py."""

import sys

from nelssa.plan.page import main

if __name__ == "__main__":
    sys.exit(main())
