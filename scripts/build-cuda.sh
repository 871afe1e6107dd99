#!/usr/bin/env bash
# Builds combiner against the CUDA LibTorch inside pip's torch ($COMBINER_PYTHON, default python3,
# -c 'import torch'), into build-cuda/ (Release, Ninja; no tests unless -DCOMBINER_BUILD_TESTS=ON,
# as scripts/test-cuda-build.sh passes). Arguments go to cmake, e.g. -DZLIB_LIBRARY=...;
# COMBINER_DEPS_PREFIX adds a prefix that holds yaml-cpp, spdlog, fmt, stb, CLI11, libjpeg and
# libpng when the system lacks them (scripts/gpu-deps.sh --unpack makes one); COMBINER_TARGETS
# names what ninja builds (default: the seven binaries; `all`: everything configured). LibTorch
# from 2.12 on needs C++20. The fused kernels (src/attention/fused/*.cu, src/ops/*.cu) build with
# nvcc into combiner_attention_cuda and combiner_ops_cuda, for -DCOMBINER_CUDA_ARCHITECTURES
# (default 90); scripts/check-cuda.sh compile-checks them without a GPU. TensorBoard event files need protobuf (libprotobuf-dev,
# protobuf-compiler, or a prefix holding them): COMBINER_TENSORBOARD=AUTO builds without them
# where they are missing, saying so, and runs then warn once that they write no events; pass
# -DCOMBINER_TENSORBOARD=ON to require them.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${COMBINER_PYTHON:-python3}
read -r torch_version torch_prefix torch_lib < <("$python" -c \
  'import os, torch; print(torch.__version__.split("+")[0], torch.utils.cmake_prefix_path,
                            os.path.join(os.path.dirname(torch.__file__), "lib"))')
# TorchConfig looks for libc10 in the system's folders before its own: where Debian's LibTorch is
# installed too (the CPU build's), it would link Debian's libc10 beside pip's libtorch. Name it.
standard=17
python3 -c "import sys; v = tuple(map(int, '$torch_version'.split('.')[:2])); sys.exit(v < (2, 12))" &&
  standard=20
export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"
echo "build-cuda: torch $torch_version at $torch_prefix, C++$standard"
cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOMBINER_BUILD_TESTS=OFF \
  -DCOMBINER_TENSORBOARD=AUTO -DCOMBINER_JEMALLOC=AUTO \
  -DCMAKE_CXX_STANDARD=$standard -DTORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}" \
  -DCMAKE_PREFIX_PATH="$torch_prefix${COMBINER_DEPS_PREFIX:+;$COMBINER_DEPS_PREFIX}" \
  -Dc10_LIBRARY="$torch_lib/libc10.so" "$@"
targets=${COMBINER_TARGETS:-combiner-train combiner-eval combiner-sample combiner-bench combiner-inspect combiner-export combiner-data}
[ "$targets" = all ] && targets=""
# shellcheck disable=SC2086  # a list of targets
ninja -C build-cuda -k 0 $targets
