#!/usr/bin/env bash
# The CUDA variant on a machine without a GPU: pip's torch (scripts/setup-cuda-deps.sh), then
# every binary and test binary against its CUDA LibTorch with the attention kernels for sm_90
# (scripts/build-cuda.sh into build-cuda/), then that build's tests on the CPU. Everything that
# needs no GPU runs; tests that need one skip with one line each. The tests that read our files
# with the real clients (TensorBoard, safetensors) and check the FlexAttention peer run here, with
# the environment's python. Then the combiner_attention package (python/) is built against that
# torch and tested (scripts/test-python.sh). CI runs this after ./scripts/test.sh; arguments go to
# ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .cache
./scripts/setup-cuda-deps.sh | tee .cache/setup-cuda-deps.log
python=$(tail -1 .cache/setup-cuda-deps.log)
python=$(cd "$(dirname "$python")" && pwd)/$(basename "$python")
COMBINER_PYTHON=$python COMBINER_TARGETS=all ./scripts/build-cuda.sh \
  -DCOMBINER_BUILD_TESTS=ON -DCOMBINER_VENV_PYTHON="$python"
(cd build-cuda && ctest --output-on-failure -j "$(nproc)" "$@")
COMBINER_PYTHON=$python COMBINER_INSPECT=$PWD/build-cuda/combiner-inspect ./scripts/test-python.sh
