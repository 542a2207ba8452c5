"""Lists the docs/results/ pages whose script or measured code changed since the commit they ran
at.

A shim: the map of pages and the code are in nelssa/experiments/stale.py."""

import sys

from nelssa.experiments.stale import main

if __name__ == "__main__":
    sys.exit(main())
