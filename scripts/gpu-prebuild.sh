#!/usr/bin/env bash
# Builds combiner-bench, combiner-train and combiner-sample for a GPU machine here, against the
# pip torch of scripts/setup-cuda-deps.sh (the GPU machines' 2.11.0+cu130), with what that machine
# lacks left out (NCCL, TensorBoard's protobuf, jemalloc), and puts them stripped and gzipped in
# .cache/gpu-bin (ignored by git; 10 MiB rather than 30, so that they travel beside the wheel and
# Fashion-MNIST under what one device call carries). scripts/test-gpu.sh unzips them and uses them
# when they load there (with the libraries of .cache/gpu-debs, scripts/gpu-deps.sh) and builds
# there when they do not, or when .cache/gpu-bin/SOURCE (scripts/source-stamp.sh of the tree they
# were built from) is not the stamp of the tree it runs in.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=$(scripts/source-stamp.sh)
scripts/setup-cuda-deps.sh
COMBINER_PYTHON=$PWD/.cache/torch-venv/bin/python \
  COMBINER_TARGETS="combiner-bench combiner-train combiner-sample" \
  scripts/build-cuda.sh -DCOMBINER_NCCL=OFF -DCOMBINER_TENSORBOARD=OFF -DCOMBINER_JEMALLOC=OFF
rm -rf .cache/gpu-bin
mkdir -p .cache/gpu-bin
for b in combiner-bench combiner-train combiner-sample; do
  strip -o ".cache/gpu-bin/$b" "build-cuda/$b"
  gzip -9 ".cache/gpu-bin/$b"
done
echo "$stamp" >.cache/gpu-bin/SOURCE
echo "gpu-prebuild: $(du -sh .cache/gpu-bin | cut -f1) in .cache/gpu-bin (sources $stamp)"
