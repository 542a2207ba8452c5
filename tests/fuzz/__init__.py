"""Property-based fuzzers (hypothesis) of every interface that takes input from outside: device
descriptors and registers past the driver, CXL.mem messages, link frames against a real
LinkServer, node requests against a real node, traces and hardware files through their loaders.

One module per target; each has hypothesis strategies for one input and a checker that runs the
input and returns its findings, judged by the oracles of ``oracle.py`` (hang, crash, wrong
result, write outside the region). The short tests (tests/test_fuzz_*.py) and the long
campaigns (scripts/fuzz.py) use the same strategies and checkers.
"""
