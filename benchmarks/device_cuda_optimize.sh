#!/usr/bin/env bash
# graphsub optimize --provider cuda on suite models, on a lent GPU machine (issue 20, item 7).
#
# The device image has onnxruntime 1.30.0 without the CUDA provider and no network, and a call carries at most
# 64 MiB, so onnxruntime-gpu (a 255.6 MB wheel, CUDA 13 build: it matches the image's CUDA 13 libraries) travels in
# six pieces over six back-to-back calls. Pieces and models are named *.onnx so that the device keeps them between
# calls (the repo's .gitignore ignores *.onnx; files ignored only by .git/info/exclude are not kept there).
#
# Here (repo root; /.dev/ in .git/info/exclude):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 -d /tmp/ortgpu onnxruntime-gpu==1.31.1
#   pip download ... -d .dev/w2 immutables==0.21 highspy==1.15.1     (graphsub's deps the image lacks)
#   split -n 6 -d /tmp/ortgpu/*.whl /tmp/p_ ; mkdir .dev/p{1..6}; mv /tmp/p_0K .dev/p$((K+1))/part.onnx
#   cp the suite's MODEL.onnx files to .dev/w3/; cp ../shared/data/taso/graph_subst.pb .dev/t/graph_subst.pb.onnx
#   cp this script to .dev/w2/
# Device calls: carry [".dev/p1"] ... [".dev/p5"] (command: true), then carry [".dev/p6", ".dev/w2", ".dev/t",
# ".dev/w3"] (within 64 MiB with the tree: split the models over calls) and run `bash .dev/w2/device_cuda_optimize.sh
# MODEL...`. Results: $OUT/MODEL.cuda.json (graphsub's --json), summarised in benchmarks/results/cuda_decisions.json.
set -u
export PYTHONUNBUFFERED=1
WHL=/tmp/onnxruntime_gpu-1.31.1-cp312-cp312-manylinux_2_28_x86_64.whl
if [ ! -d /tmp/site/onnxruntime ]; then
  cat .dev/p1/part.onnx .dev/p2/part.onnx .dev/p3/part.onnx .dev/p4/part.onnx .dev/p5/part.onnx .dev/p6/part.onnx > $WHL
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    $WHL .dev/w2/*.whl || exit 3
  # load the CUDA libraries from the image's nvidia-* packages before any session is made
  printf 'try:\n    import onnxruntime\n    onnxruntime.preload_dlls()\nexcept Exception as e:\n    print("preload failed", e)\n' \
    > /tmp/site/sitecustomize.py
fi
export PYTHONPATH=/tmp/site:$PWD/src GRAPHSUB_TASO_PB=$PWD/.dev/t/graph_subst.pb.onnx
python3 -c "import onnxruntime as o; print(o.__version__, o.get_available_providers())"
for m in "$@"; do
  echo "== $m $(date +%T)"
  timeout 170 python3 -c "from graphsub.cli import main; main()" optimize .dev/w3/$m.onnx --provider cuda \
    -o /tmp/$m.cuda.onnx --budget 60 --json > $OUT/$m.cuda.json 2> /tmp/$m.cuda.err
  echo "rc=$?"; tail -3 /tmp/$m.cuda.err
done
