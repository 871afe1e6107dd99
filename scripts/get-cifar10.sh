#!/usr/bin/env bash
# Downloads CIFAR-10's binary version into data/cifar-10-batches-bin (or the folder given as
# $1's parent: the archive always unpacks to cifar-10-batches-bin/) and checks the archive's
# published MD5 before unpacking. Needs curl or wget, md5sum and tar.
set -euo pipefail

url="https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"
md5="c32a1d4ab5d03f1284b67883e8d87530"  # published on https://www.cs.toronto.edu/~kriz/cifar.html
parent="${1:-data}"
archive="$parent/cifar-10-binary.tar.gz"
target="$parent/cifar-10-batches-bin"

mkdir -p "$parent"
if [ ! -f "$archive" ]; then
  echo "get-cifar10: downloading $url"
  if command -v curl >/dev/null; then
    curl -fL --retry 3 -o "$archive.part" "$url"
  else
    wget -O "$archive.part" "$url"
  fi
  mv "$archive.part" "$archive"
fi

found="$(md5sum "$archive" | cut -d' ' -f1)"
if [ "$found" != "$md5" ]; then
  echo "get-cifar10: $archive has MD5 $found, expected $md5; delete it and run again" >&2
  exit 1
fi

tar -xzf "$archive" -C "$parent"
for f in data_batch_1.bin data_batch_2.bin data_batch_3.bin data_batch_4.bin data_batch_5.bin \
         test_batch.bin; do
  size="$(stat -c %s "$target/$f")"
  if [ "$size" != 30730000 ]; then
    echo "get-cifar10: $target/$f has $size bytes, expected 30730000" >&2
    exit 1
  fi
done
echo "get-cifar10: ready in $target (use data.dir: $target)"
