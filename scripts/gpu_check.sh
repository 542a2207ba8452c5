#!/usr/bin/env bash
# The GPU side on a real GPU (issue 45): on a machine with an NVIDIA GPU, in a few minutes,
# leaves its figures in one folder (DIR, default $OUT, else gpu-check/), at most 8 files:
#   facts.json         nvidia-smi's facts, torch and its CUDA, the host, the commit
#   gpu-measured.json  the preset scripts/calibrate_gpu.py fitted on the GPU (name, date, device)
#   calibrate.log      its kernel times
#   decode.json/.log   `nelssa decode` of the Llama-3-8B shape (4 layers) on 4 model devices,
#                      the GPU side on CUDA: two requests of 32K tokens on the GPU, one of
#                      128K on the PNM tier, 8 steps measured by CUDA events
#   kernels.json/.md   each kernel family measured against the roofline of the GPU's preset
# Then, here or there: python scripts/gpu_page.py DIR  (writes docs/results/gpu.md).
#
# From a session with the device tool (the GPU machine has no network and no .git):
#   scripts/gpu_wheels.sh                                   # here: .whl/ (ignored by git)
#   run(command="NELSSA_COMMIT=<git rev-parse HEAD, here> bash scripts/gpu_check.sh $OUT",
#       carry=[".whl"], timeout_s=560)                      # there, about 3 minutes
#   copy the 7 files into docs/results/gpu_check/, then
#   .venv/bin/python scripts/gpu_page.py docs/results/gpu_check --out docs/results/gpu.md
#
# Needs: python3 with a CUDA torch (PYTHON=... to choose another), and the packages of
# requirements-dev.txt that `decode` imports. The GPU machines' image has torch, numpy,
# matplotlib and PyYAML but no network: run scripts/gpu_wheels.sh where pip reaches the index
# first (it fills .whl/, about 4 MB), carry .whl, and this script installs them into
# /tmp/nelssa-site. The package runs from the tree (no `make venv`, no Verilator: model devices).
#
# GPU_CHECK_DEVICE=cpu: a smoke run of the same steps on the CPU (tiny calibration, a decode of
# 1 layer and a few thousand tokens, bf16 weights as on CUDA, the roofline timer): the script's
# flow, checked without a GPU; its figures say nothing of one.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:-${OUT:-gpu-check}}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
PY=${PYTHON:-python3}
start=$SECONDS
say() { echo "[gpu_check $((SECONDS - start)) s] $*"; }

if ! "$PY" -c "import construct, isal, pydantic, zmq" 2> /dev/null \
    && compgen -G "$ROOT/.whl/*.whl" > /dev/null; then
  say "installing $(ls "$ROOT"/.whl/*.whl | wc -l) wheels from .whl into /tmp/nelssa-site"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/nelssa-site "$ROOT"/.whl/*.whl
fi
# the package from the tree, its folders where pyproject's package-dir puts them
SRC=/tmp/nelssa-src
rm -rf "$SRC" && mkdir -p "$SRC/nelssa"
ln -s "$ROOT"/nelssa/* "$SRC/nelssa/"
for d in hw driver host emu; do ln -s "$ROOT/$d" "$SRC/nelssa/$d"; done
export PYTHONPATH="$SRC:/tmp/nelssa-site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export NELSSA_COMMIT=${NELSSA_COMMIT:-$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)}
DEVICE=${GPU_CHECK_DEVICE:-cuda}
if ! "$PY" -c "import torch, nelssa.cli, nelssa.cosim; assert '$DEVICE' == 'cpu' or \
    torch.cuda.is_available(), 'torch sees no CUDA device'"; then
  echo "gpu_check: $PY cannot run the decode on CUDA (above: what is missing)" >&2
  exit 2
fi

say "facts"
"$PY" -m nelssa.experiments.gpu_check facts "$DIR"
nvidia-smi || true

say "calibrate_gpu.py on the GPU"
GPU_NAME=$("$PY" -c "import torch; print(torch.cuda.get_device_name(0) if '$DEVICE' == 'cuda' \
else 'cpu')")
NAME=measured-$(echo "$GPU_NAME" | tr 'A-Z' 'a-z' | tr -cs 'a-z0-9' '-' | sed 's/^-*//; s/-*$//')
CAL=(--device "$DEVICE" --datasheet)
[ "$DEVICE" = cpu ] && CAL=(--device cpu --scale 0.001 --reps 1)
timeout 180 "$PY" "$ROOT/scripts/calibrate_gpu.py" "${CAL[@]}" --name "$NAME" \
  --out "$DIR/gpu-measured.json" > "$DIR/calibrate.log" 2>&1 || {
  echo "calibrate_gpu.py failed:" >&2; tail -20 "$DIR/calibrate.log" >&2; exit 1; }
cat "$DIR/calibrate.log"

# the roofline beside the measured times: the preset of this part (an H200's, else the
# H100 NVL's, the paper's GPU)
PRESET=h100-nvl
case "$GPU_NAME" in *H200*) PRESET=h200;; esac
RUN=(--layers 4 --short 2 --short-len 32768 --long 1 --long-len 131056 --t-input 65536
     --steps 8)
[ "$DEVICE" = cpu ] && RUN=(--layers 1 --short 2 --short-len 1024 --long 1 --long-len 4096
                            --t-input 2048 --steps 2 --torch-weights bfloat16)
say "decode on $DEVICE, roofline of $PRESET beside"
TMP=$(mktemp -d)
timeout 330 "$PY" -m nelssa.cli decode --backend model --devices 4 --model llama-3-8b \
  --weight-sets 1 --prefill emulated --kmeans-iterations 3 --no-accuracy "${RUN[@]}" \
  --torch-device "$DEVICE" --gpu "$PRESET" --trace "$TMP/decode-trace.json" \
  --plot "$TMP/decode.png" --json "$DIR/decode.json" > "$DIR/decode.log" 2>&1 || {
  echo "decode failed:" >&2; tail -40 "$DIR/decode.log" >&2; exit 1; }
tail -25 "$DIR/decode.log"

say "measured against the roofline, per kernel family"
"$PY" -m nelssa.experiments.gpu_check kernels "$DIR"
say "done: $(ls "$DIR" | tr '\n' ' ')"
echo "next: python scripts/gpu_page.py $DIR   (writes docs/results/gpu.md)"
