#!/usr/bin/env bash
# Fetches the downsampled ImageNet 64x64 of van den Oord et al. (2016) -- the version the
# PixelRNN, Sparse Transformer and Combiner bits/dim figures use -- and unpacks it into
# <dest>/train/*.png and <dest>/valid/*.png, the layout combiner's loader reads.
#
# The original host (http://image-net.org/small/) no longer serves the files, so give a mirror:
#   IMAGENET64_TRAIN_URL=... IMAGENET64_VALID_URL=... scripts/get-imagenet64.sh [dest]
# or put train_64x64.tar and valid_64x64.tar into <dest> yourself and run the script.
# Checksums: no published SHA-256 is known to us. Pass IMAGENET64_TRAIN_SHA256 and
# IMAGENET64_VALID_SHA256 from a source you trust to have them verified; otherwise the script
# records the SHA-256 of what it got in <dest>/SHA256SUMS on first use (trust on first use) and
# verifies against that record on every later run.
set -euo pipefail

dest="${1:-data/imagenet64}"
train_url="${IMAGENET64_TRAIN_URL:-http://image-net.org/small/train_64x64.tar}"
valid_url="${IMAGENET64_VALID_URL:-http://image-net.org/small/valid_64x64.tar}"
sums="$dest/SHA256SUMS"
mkdir -p "$dest"

fetch() {  # url file
  [ -f "$2" ] && return 0
  echo "get-imagenet64: downloading $1"
  if command -v curl >/dev/null; then
    curl -fL --retry 3 -o "$2.part" "$1"
  else
    wget -O "$2.part" "$1"
  fi
  mv "$2.part" "$2"
}

verify() {  # file expected-sha256-or-empty
  local name found recorded
  name="$(basename "$1")"
  found="$(sha256sum "$1" | cut -d' ' -f1)"
  if [ -n "$2" ]; then
    [ "$found" = "$2" ] && return 0
    echo "get-imagenet64: $1 has SHA-256 $found, expected $2 (as given)" >&2
    exit 1
  fi
  recorded=""
  if [ -f "$sums" ]; then recorded="$(awk -v n="$name" '$2 == n {print $1}' "$sums")"; fi
  if [ -z "$recorded" ]; then
    echo "$found  $name" >>"$sums"
    echo "get-imagenet64: WARNING: no checksum given for $name; recorded $found in $sums." >&2
    echo "get-imagenet64: compare it with a trusted source -- it is not verified." >&2
  elif [ "$recorded" != "$found" ]; then
    echo "get-imagenet64: $1 has SHA-256 $found, but $sums recorded $recorded" >&2
    exit 1
  fi
}

unpack() {  # tar-file split-folder-name expected-count
  local tmp folder count
  if [ -d "$dest/$2" ]; then
    echo "get-imagenet64: $dest/$2 exists; leaving it as is"
    return 0
  fi
  tmp="$(mktemp -d "$dest/.unpack.XXXXXX")"
  tar -xf "$1" -C "$tmp"
  folder="$(dirname "$(find "$tmp" -name '*.png' -print -quit)")"
  if [ "$folder" = "." ]; then
    echo "get-imagenet64: $1 holds no .png files" >&2
    exit 1
  fi
  mv "$folder" "$dest/$2"
  rm -rf "$tmp"
  count="$(find "$dest/$2" -maxdepth 1 -name '*.png' | wc -l)"
  if [ "$count" != "$3" ]; then
    echo "get-imagenet64: WARNING: $dest/$2 holds $count PNGs; the published set has $3" >&2
  fi
}

fetch "$train_url" "$dest/train_64x64.tar"
fetch "$valid_url" "$dest/valid_64x64.tar"
verify "$dest/train_64x64.tar" "${IMAGENET64_TRAIN_SHA256:-}"
verify "$dest/valid_64x64.tar" "${IMAGENET64_VALID_SHA256:-}"
unpack "$dest/train_64x64.tar" train 1281149
unpack "$dest/valid_64x64.tar" valid 49999
echo "get-imagenet64: ready in $dest (data.dataset: imagenet64, data.dir: $dest)"
