#!/usr/bin/env python3
"""Writes N PNG images of SIZE x SIZE (RGB): a vertical colour gradient with one filled disc and
one filled rectangle at random places, in random colours, for trying `combiner-data pack --from`
and a short training run on a folder of images without any dataset (numpy and zlib only).

  scripts/make-shape-images.py OUT_DIR [N (default 200)] [SIZE (default 128)] [SEED (default 0)]
"""
import os
import struct
import sys
import zlib

import numpy as np


def write_png(path, image):
    h, w, _ = image.shape
    raw = np.concatenate([np.zeros((h, 1), np.uint8), image.reshape(h, w * 3)], axis=1).tobytes()

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def main():
    out = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    size = int(sys.argv[3]) if len(sys.argv) > 3 else 128
    rng = np.random.default_rng(int(sys.argv[4]) if len(sys.argv) > 4 else 0)
    os.makedirs(out, exist_ok=True)
    y, x = np.mgrid[0:size, 0:size]
    for i in range(n):
        top, bottom = rng.integers(0, 256, 3), rng.integers(0, 256, 3)
        t = (y / max(size - 1, 1))[..., None]
        image = (top * (1 - t) + bottom * t).astype(np.uint8)
        cy, cx, r = rng.integers(0, size, 2).tolist() + [int(rng.integers(size // 8, size // 3))]
        image[(y - cy) ** 2 + (x - cx) ** 2 <= r * r] = rng.integers(0, 256, 3)
        y0, x0 = rng.integers(0, size * 3 // 4, 2)
        h, w = rng.integers(size // 8, size // 3, 2)
        image[y0:y0 + h, x0:x0 + w] = rng.integers(0, 256, 3)
        write_png(os.path.join(out, f"{i:05d}.png"), image)


if __name__ == "__main__":
    main()
