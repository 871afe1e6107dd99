#!/usr/bin/env bash
# Builds the combiner_attention wheel (python/) with the fused CUDA kernels for a GPU machine here,
# against the pip torch of scripts/setup-cuda-deps.sh (the GPU machines' 2.11.0+cu130), into
# .cache/gpu-wheel (ignored by git). scripts/test-gpu.sh's `python` stage installs it there (no
# network needed) and runs its CUDA tests and python -m combiner_attention.bench, if
# .cache/gpu-wheel/SOURCE (scripts/source-stamp.sh at build time) is the stamp of the tree there.
# Arguments go to pip wheel, e.g. --config-settings=cmake.define.COMBINER_CUDA_ARCHITECTURES=80.
set -euo pipefail
cd "$(dirname "$0")/.."
python=$(scripts/setup-cuda-deps.sh | tail -1)
export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"
stamp=$(scripts/source-stamp.sh)
rm -rf .cache/gpu-wheel
start=$(date +%s)
"$python" -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps ./python \
  -w .cache/gpu-wheel --config-settings=cmake.define.COMBINER_CUDA=ON \
  --config-settings=build-dir=build/gpu-wheel "$@"
echo "$stamp" >.cache/gpu-wheel/SOURCE
echo "python-wheel: $(basename .cache/gpu-wheel/*.whl) ($(du -k .cache/gpu-wheel/*.whl | cut -f1) KiB)" \
  "in $(( $(date +%s) - start )) s (sources $stamp)"
