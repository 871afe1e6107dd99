#!/usr/bin/env bash
# The Debian 12 packages that build combiner beside pip's CUDA LibTorch on a machine whose image
# lacks them and reaches no network: yaml-cpp, spdlog, fmt, CLI11, stb, zlib, libjpeg-turbo and
# libpng (headers, CMake files, libraries).
#   scripts/gpu-deps.sh                 downloads them (apt-get download, no install) into
#                                       .cache/gpu-debs/ (ignored by git): what the device tool's
#                                       `carry` takes to the GPU machine
#   scripts/gpu-deps.sh --unpack DIR    unpacks them there with dpkg -x into DIR and prints the
#                                       prefix to give scripts/build-cuda.sh (COMBINER_DEPS_PREFIX)
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.cache/gpu-debs
# zlib1g too: zlib1g-dev's libz.so points at Debian's exact libz.so.1.x. catch2, which
# libspdlog-dev also depends on, serves only spdlog's own tests.
packages=(libyaml-cpp-dev libyaml-cpp0.7 libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
  libcli11-dev libstb-dev libstb0 zlib1g-dev zlib1g libjpeg62-turbo-dev libjpeg62-turbo
  libpng-dev libpng16-16)

if [ "${1:-}" = "--unpack" ]; then
  prefix=${2:?usage: scripts/gpu-deps.sh --unpack DIR}
  for p in "${packages[@]}"; do
    [ -f "$dest/$p.deb" ] || { echo "gpu-deps: $dest/$p.deb missing (run scripts/gpu-deps.sh)" >&2; exit 1; }
    dpkg -x "$dest/$p.deb" "$prefix"
  done
  # Links to absolute paths (libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13) would leave the
  # prefix: point them at the same file inside it.
  find "$prefix" -type l | while read -r link; do
    target=$(readlink "$link")
    case "$target" in /*) [ -e "$prefix$target" ] && ln -sfn "$prefix$target" "$link" ;; esac
  done
  echo "$prefix/usr"
  exit 0
fi

rm -rf "$dest"
mkdir -p "$dest"
if ! (cd "$dest" && apt-get download -q "${packages[@]}"); then
  echo "gpu-deps: apt-get download failed (run apt-get update first?)" >&2
  exit 1
fi
# Plain names (package.deb) instead of apt's, which hold '%3a', '~' and '+'.
for deb in "$dest"/*.deb; do
  name=$(dpkg-deb -f "$deb" Package)
  [ "$deb" = "$dest/$name.deb" ] || mv "$deb" "$dest/$name.deb"
done
count=$(find "$dest" -name '*.deb' | wc -l)
if [ "$count" -ne ${#packages[@]} ]; then
  echo "gpu-deps: got $count of ${#packages[@]} packages in $dest (run apt-get update?)" >&2
  exit 1
fi
echo "gpu-deps: ${#packages[@]} packages, $(du -sh "$dest" | cut -f1), in $dest"
