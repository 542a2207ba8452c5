"""Long fuzz campaigns over the fuzzers of tests/fuzz/: writes docs/results/fuzz.md.

A shim: the options, the defaults and the code are in tests/fuzz/campaign.py (the fuzzers are a
helper package of the tests, not installed)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.fuzz.campaign import main

if __name__ == "__main__":
    sys.exit(main())
