"""KV ingestion beside decode: a shim; the study is nelssa/experiments/ingest_beside.py."""

import sys

from nelssa.experiments.ingest_beside import main

if __name__ == "__main__":
    sys.exit(main())
