"""Two clients sharing a PNM node; writes docs/results/node_sharing.md.

A shim: the options, the defaults and the code are in nelssa/experiments/node_sharing.py."""

import sys

from nelssa.experiments.node_sharing import main

if __name__ == "__main__":
    sys.exit(main())
