#!/usr/bin/env bash
# Prints a short hash of the sources the GPU machine's carried artifacts are built from (the
# binaries of scripts/gpu-prebuild.sh, the wheel of scripts/python-wheel.sh): every file under
# src/, cmake/ and python/ and the top CMakeLists.txt, by path and content, less their Markdown
# and what git ignores there (python/build/, Python's caches). It reads no git metadata, so a copy of the working tree
# without .git (the GPU machine's) gives the same stamp as this clone; scripts/test-gpu.sh uses
# it to refuse artifacts built from other sources than the tree it runs in.
# Usage: scripts/source-stamp.sh
set -euo pipefail
cd "$(dirname "$0")/.."
find CMakeLists.txt cmake src python \
  \( -path python/build -o -name __pycache__ -o -name '*.egg-info' \) -prune -o \
  -type f ! -name '*.pyc' ! -name '*.md' -print0 |
  LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
