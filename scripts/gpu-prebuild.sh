#!/usr/bin/env bash
# Builds combiner-bench, combiner-train and combiner-sample for a GPU machine here, against the
# pip torch of scripts/setup-cuda-deps.sh (the GPU machines' 2.11.0+cu130), with what that machine
# lacks left out (NCCL, TensorBoard's protobuf, jemalloc), and puts them stripped in one xz tar
# in .cache/gpu-bin (ignored by git). The three hold the same kernels (each 14 MB stripped, 11 MB
# of it the fatbin), which one xz stream with its 64 MiB window stores once: 7.5 MB for the three,
# against 23 MB gzipped one by one, so that they travel beside the wheel, the Debian packages and
# Fashion-MNIST under the 64 MiB one device call carries. scripts/test-gpu.sh unpacks them (with
# Python's tarfile) and uses them when they load there (with the libraries of .cache/gpu-debs,
# scripts/gpu-deps.sh) and builds there when they do not, or when .cache/gpu-bin/SOURCE
# (scripts/source-stamp.sh of the tree they were built from) is not the stamp of the tree it
# runs in.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=$(scripts/source-stamp.sh)
scripts/setup-cuda-deps.sh
COMBINER_PYTHON=$PWD/.cache/torch-venv/bin/python \
  COMBINER_TARGETS="combiner-bench combiner-train combiner-sample" \
  scripts/build-cuda.sh -DCOMBINER_NCCL=OFF -DCOMBINER_TENSORBOARD=OFF -DCOMBINER_JEMALLOC=OFF
rm -rf .cache/gpu-bin
mkdir -p .cache/gpu-bin
staged=$(mktemp -d)
trap 'rm -rf "$staged"' EXIT
for b in combiner-bench combiner-train combiner-sample; do
  strip -o "$staged/$b" "build-cuda/$b"
done
# One thread: a multi-threaded xz cuts the stream into blocks and stores the kernels three times.
tar -C "$staged" -cf - combiner-bench combiner-train combiner-sample |
  xz -9 -T1 >.cache/gpu-bin/binaries.tar.xz
echo "$stamp" >.cache/gpu-bin/SOURCE
echo "gpu-prebuild: $(du -sh .cache/gpu-bin | cut -f1) in .cache/gpu-bin (sources $stamp)"
