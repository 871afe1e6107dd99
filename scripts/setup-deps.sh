#!/usr/bin/env bash
# Installs everything combiner needs from Debian 12's packages. Idempotent: a
# second run installs nothing and takes a second. Run as root, or with sudo.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libtorch-dev
  libopenblas0-openmp     # without it LibTorch falls back to the reference BLAS (25-50x slower)
  libgloo-dev
  libjemalloc-dev         # the binaries' malloc: less memory and faster steps than glibc's here
  libyaml-cpp-dev libspdlog-dev libfmt-dev libcli11-dev libstb-dev zlib1g-dev
  libjpeg62-turbo-dev libpng-dev  # reading JPEG and PNG files (src/util/image_decode*.cpp)
  libprotobuf-dev protobuf-compiler  # TensorBoard event files (src/tfevent/tensorboard_event.proto)
  libgtest-dev
  dataset-fashion-mnist   # the quick-start data, under /usr/share/datasets/fashion-mnist
  python3-torch python3-numpy  # reference checks in tests only
  python3-protobuf             # tests decode the event files as TensorBoard's readers do
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup-deps: installing ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
