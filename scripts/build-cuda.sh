#!/usr/bin/env bash
# Builds combiner against the CUDA LibTorch inside pip's torch (python3 -c 'import torch'), into
# build-cuda/ (Release, Ninja, no tests: the test suite runs on the CPU build). Arguments go to
# cmake, e.g. -DZLIB_LIBRARY=...; COMBINER_DEPS_PREFIX adds a prefix that holds yaml-cpp, spdlog,
# fmt, stb and CLI11 when the system lacks them (scripts/gpu-deps.sh --unpack makes one);
# COMBINER_TARGETS narrows what ninja builds (default: the six binaries). LibTorch from 2.12 on
# needs C++20. The fused attention kernels (src/attention/*.cu) build with nvcc into
# combiner_attention_cuda, for -DCOMBINER_CUDA_ARCHITECTURES (default 90); scripts/check-cuda.sh
# compile-checks them without a GPU. TensorBoard event files need protobuf (libprotobuf-dev,
# protobuf-compiler, or a prefix holding them): COMBINER_TENSORBOARD=AUTO builds without them
# where they are missing, saying so, and runs then warn once that they write no events; pass
# -DCOMBINER_TENSORBOARD=ON to require them.
set -euo pipefail
cd "$(dirname "$0")/.."
read -r torch_version torch_prefix < <(python3 -c \
  'import torch; print(torch.__version__.split("+")[0], torch.utils.cmake_prefix_path)')
standard=17
python3 -c "import sys; v = tuple(map(int, '$torch_version'.split('.')[:2])); sys.exit(v < (2, 12))" &&
  standard=20
export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"
echo "build-cuda: torch $torch_version at $torch_prefix, C++$standard"
cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOMBINER_BUILD_TESTS=OFF \
  -DCOMBINER_TENSORBOARD=AUTO -DCOMBINER_JEMALLOC=AUTO \
  -DCMAKE_CXX_STANDARD=$standard -DTORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}" \
  -DCMAKE_PREFIX_PATH="$torch_prefix${COMBINER_DEPS_PREFIX:+;$COMBINER_DEPS_PREFIX}" "$@"
# shellcheck disable=SC2086  # a list of targets
ninja -C build-cuda -k 0 ${COMBINER_TARGETS:-combiner-train combiner-eval combiner-sample combiner-bench combiner-inspect combiner-export}
