"""The paper's head-of-line blocking setting (Figures 14 and 15): a shim; the study is
nelssa/experiments/paper_hol.py."""

import sys

from nelssa.experiments.paper_hol import main

if __name__ == "__main__":
    sys.exit(main())
