#!/usr/bin/env bash
# The suite on ONNX Runtime's CUDA provider, on a lent GPU machine (issue 20, item 7): every variant (the original,
# each peer's output, graphsub's) timed side by side on the CUDA provider, graphsub deciding there
# (`graphsub bench suite --provider cuda`), written to $OUT; the run of 2026-11-27 (its name then: suite28_cuda)
# is experiments/results/suite_cuda.{jsonl,md}. The check of the provider alone is tools/dev/cuda_smoke.py.
#
# That machine has Python 3.12 with PyTorch's CUDA 13 libraries but the CPU onnxruntime, and no network; a call
# carries 64 MiB with the working tree (~20 MB). So onnxruntime-gpu (1.31.1, the CUDA 13 build: a 255.6 MB wheel)
# travels in pieces over back-to-back calls, each copied to $DEV (default /tmp/dev, kept while the machine is warm).
# Here, in the repo root (/.dev/ and /.whl/ in .git/info/exclude):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 -d /tmp/ortgpu onnxruntime-gpu==1.31.1
#   unzip the wheel, drop onnxruntime/capi/libonnxruntime_providers_tensorrt.so, and
#   tar cf - onnxruntime onnxruntime_gpu-1.31.1.dist-info | xz -9 -T2 > ortgpu.tar.xz   (202.7 MB)
#   split -b 46000000 ortgpu.tar.xz .dev/cK/ort.part...   (aa..ae: one piece per call, K = 1..5)
#   the same pip download for immutables==0.21 highspy==1.15.1 onnxslim==0.1.98 onnxsim==0.8.1
#       onnxoptimizer==0.4.2 into .dev/c5/whl/ (graphsub's dependencies and the peers the image lacks)
#   the suite's manifest.json and MODEL.onnx files into .dev/cK/suite/, K up to 7, each .dev/cK at most ~46 MB
# Device calls: carry [".dev/cK"], command `mkdir -p /tmp/dev && cp -r .dev/cK/. /tmp/dev/` (the fifth adds
# `&& bash tools/dev/cuda_device.sh smoke`, the last `&& bash tools/dev/cuda_device.sh suite MODELS`).
#
#   bash tools/dev/cuda_device.sh smoke            # unpack, install, check the CUDA provider (tools/dev/cuda_smoke.py)
#   bash tools/dev/cuda_device.sh suite MODELS     # and run `graphsub bench suite --provider cuda` on MODELS
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
python3 tools/dev/cuda_smoke.py 2>&1 | tee "$OUT/smoke.log" || exit 4
[ "${1:-smoke}" = suite ] || exit 0
export GRAPHSUB_SUITE_DIR="$DEV/suite" GRAPHSUB_SUITE_WORK=/tmp/work
python3 -m graphsub bench suite --provider cuda --models "$2" --threads all --alone --budget "${BUDGET:-30}" \
    --name "${NAME:-suite_cuda}" --out "$OUT" --no-plots 2>&1 | tail -60
