#!/usr/bin/env bash
# Pack throughput of your own images: writes N PNGs of mixed sizes (random noise, 32 to 256
# pixels a side, RGB and grayscale) into a scratch folder with Python's zlib and numpy, then times
# `combiner-data pack --from` on them at --size (default 64).
# Usage: scripts/bench-pack-images.sh [N (default 100000)] [SIZE] [BUILD (default build)]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-100000} size=${2:-64} build=${3:-build}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 - "$work/images" "$n" <<'PY'
import os, struct, sys, zlib
import numpy as np
out, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
for i in range(n):
    folder = os.path.join(out, f"{i // 1000:03d}")
    if i % 1000 == 0:
        os.makedirs(folder, exist_ok=True)
    w, h = (int(v) for v in rng.integers(32, 257, 2))
    c = 3 if i % 4 else 1
    pixels = rng.integers(0, 256, (h, w * c), dtype=np.uint8)
    raw = np.concatenate([np.zeros((h, 1), np.uint8), pixels], axis=1).tobytes()
    header = struct.pack(">IIBBBBB", w, h, 8, 2 if c == 3 else 0, 0, 0, 0)
    with open(os.path.join(folder, f"{i:06d}.png"), "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 1))
                + chunk(b"IEND", b""))
PY
echo "bench-pack-images: $n PNGs, $(du -sh "$work/images" | cut -f1), $(nproc) cores"
start=$(date +%s.%N)
"$build/combiner-data" pack --from "$work/images" --size "$size" --out "$work/packed" \
  --test-fraction 0.01 | tail -1
end=$(date +%s.%N)
awk -v n="$n" -v s="$start" -v e="$end" \
  'BEGIN { printf "bench-pack-images: %d images in %.1f s: %.0f images/s\n", n, e - s, n / (e - s) }'
