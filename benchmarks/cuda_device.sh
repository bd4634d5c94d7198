#!/usr/bin/env bash
# The suite on ONNX Runtime's CUDA provider, on a lent GPU machine (issue 20, item 7). That machine has Python 3.12
# with PyTorch's CUDA 13 libraries but the CPU onnxruntime, and no network: onnxruntime-gpu (1.31.1, CUDA 13) and
# graphsub's missing dependencies travel with the working tree, in pieces (see benchmarks/results/suite28_cuda.md
# for how they were made), and are gathered under $DEV (default /tmp/dev) before this runs:
#   $DEV/ort.part*   xz-compressed tar of the unpacked onnxruntime-gpu wheel (its TensorRT library left out)
#   $DEV/whl/*.whl   immutables, highspy, onnxslim, onnxsim, onnxoptimizer (cp312)
#   $DEV/suite/      manifest.json and the suite's .onnx files to run
#
#   bash benchmarks/cuda_device.sh smoke            # unpack, install, check the CUDA provider (benchmarks/cuda_smoke.py)
#   bash benchmarks/cuda_device.sh suite MODELS     # and run `graphsub bench suite --provider cuda` on MODELS
set -uo pipefail
DEV=${DEV:-/tmp/dev}
SITE=${SITE:-/tmp/site}
OUT=${OUT:-/tmp/out}
mkdir -p "$SITE" "$OUT"
if [ ! -f "$SITE/.installed" ]; then
    cat "$DEV"/ort.part* | python3 -c 'import sys, tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode="r|xz").extractall(sys.argv[1], filter="tar")' "$SITE" || exit 3
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$DEV"/whl/*.whl || exit 3
    touch "$SITE/.installed"
fi
# CUDA 13's cuBLAS, cuDNN, cuRAND ... as PyTorch's wheels installed them
PURE=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
LIBS=$(find "$PURE/nvidia" -type d -name lib 2>/dev/null | tr '\n' ':')
export LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:-}"
export PYTHONPATH="$SITE:$PWD/src" PYTHONUNBUFFERED=1
nvidia-smi -L
python3 benchmarks/cuda_smoke.py 2>&1 | tee "$OUT/smoke.log" || exit 4
[ "${1:-smoke}" = suite ] || exit 0
export GRAPHSUB_SUITE_DIR="$DEV/suite" GRAPHSUB_SUITE_WORK=/tmp/work
python3 -m graphsub bench suite --provider cuda --models "$2" --threads all --alone --budget "${BUDGET:-6}" \
    --name "${NAME:-suite28_cuda}" --out "$OUT" --no-plots 2>&1 | tail -60
