#!/usr/bin/env bash
# The Python packages `nelssa decode` needs that the GPU machine's image lacks (its python3 holds
# a CUDA torch, numpy, matplotlib, PyYAML, but not these), as cp312 manylinux wheels in .whl/ for
# scripts/gpu_check.sh to install offline there. Run here, where pip reaches the package index;
# the versions are requirements-dev.txt's (pydantic's own needs beside it).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
WANT="construct==2.10.70 isal==1.9.1 pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0
typing-inspection==0.4.5 typing_extensions==4.16.0 pyzmq==27.3.0"
mkdir -p .whl
for w in $WANT; do
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 --platform any -d .whl "$w"
done
ls -la .whl
