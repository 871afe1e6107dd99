#!/usr/bin/env bash
# Configures and builds combiner (Release, Ninja) into build/. Extra arguments go to cmake,
# e.g. -DCMAKE_PREFIX_PATH=... for a CUDA LibTorch.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
ninja -C build -j "$jobs"
