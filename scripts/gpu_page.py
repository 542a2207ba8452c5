"""Write docs/results/gpu.md from the folder scripts/gpu_check.sh left (issue 45).

A shim: the code is in nelssa/experiments/gpu_check.py (`page`).

    python scripts/gpu_page.py DIR [--out docs/results/gpu.md]"""

import sys

from nelssa.experiments.gpu_check import main

if __name__ == "__main__":
    sys.exit(main(["page", *sys.argv[1:]]))
