#!/usr/bin/env bash
# Configures and builds combiner (Release, Ninja) into build/. Arguments are ninja targets
# (default: everything, tests included), e.g. `./scripts/build.sh combiner-train`.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build -j "$(nproc)" "$@"
